package vgpu

import (
	"context"
	"fmt"
	"maps"

	"k8s.io/klog/v2"
	k8sframework "k8s.io/kubernetes/pkg/scheduler/framework"
	"volcano.sh/volcano/pkg/scheduler/cache"
	"volcano.sh/volcano/pkg/scheduler/framework"

	"github.com/volcano-vgpu/volcano-vgpu/api"
)

var (
	_ framework.BindContextHandler = (*plugin)(nil)
	_ cache.PreBinder              = (*plugin)(nil)
)

// bindExtension carries a task's assignment from the session that decided it
// to the bind goroutine, which may run after the session closed.
type bindExtension struct {
	assignment api.Assignment
	err        error // encoding failed: PreBind refuses the bind
}

// SetupBindContextExtension is called in the session goroutine when the
// task's gang has committed and the task is dispatched for binding. The
// booking is recorded here: Volcano's cache already shows the pod on its
// node, and the next session may open before the Binding lands; from now on
// it sees these GPUs as taken.
//
// The assignment reaches the pod with the Binding itself, in one API write:
// Volcano's default binder sends the task's pod annotations as the Binding's
// annotations, and kube-apiserver's binding storage copies them onto the pod
// in the same update that sets spec.nodeName, under the pod's UID as a
// precondition. So a pod recreated under the same name is never annotated,
// and a failed Binding leaves nothing on the pod. The task's pod is replaced
// by a copy carrying this decision (the informer's object is shared, and may
// carry a stale or copied assignment that must not travel).
func (p *plugin) SetupBindContextExtension(_ *k8sframework.CycleState, bindCtx *cache.BindContext) {
	task := bindCtx.TaskInfo
	pl, ok := p.booked[task.UID]
	if !ok {
		return
	}
	a := toAssignment(pl, string(task.Pod.UID))
	a.Time = p.shared.Now()
	value, err := api.EncodeAssignment(a)
	bindCtx.Extensions[PluginName] = &bindExtension{assignment: a, err: err}
	if err != nil {
		return
	}
	p.shared.Inflight.Put(task.Pod.UID, a, value)
	pod := *task.Pod
	pod.Annotations = maps.Clone(task.Pod.Annotations)
	if pod.Annotations == nil {
		pod.Annotations = map[string]string{}
	}
	pod.Annotations[api.AssignmentKey] = value
	task.Pod = &pod
}

// PreBind refuses to bind a GPU pod whose assignment could not be encoded:
// bound without one, the device plugin could serve it no GPU. It writes
// nothing; the assignment travels in the Binding.
func (p *plugin) PreBind(ctx context.Context, bindCtx *cache.BindContext) error {
	ext, ok := bindCtx.Extensions[PluginName].(*bindExtension)
	if !ok {
		return nil
	}
	pod := bindCtx.TaskInfo.Pod
	if ext.err != nil {
		return fmt.Errorf("vgpu: encode the GPU assignment of %s/%s: %w", pod.Namespace, pod.Name, ext.err)
	}
	klog.FromContext(ctx).V(4).Info("Binding with GPU assignment", "pod", klog.KObj(pod), "node", ext.assignment.Node)
	return nil
}

// PreBindRollBack forgets the booking in flight when another PreBinder or
// the Binding failed. Nothing is left on the pod: the assignment travels only
// in the Binding, which did not land. (Should it have landed after all, e.g.
// a timeout after the write, the pod carries the assignment and the next
// session books it from there.)
func (p *plugin) PreBindRollBack(ctx context.Context, bindCtx *cache.BindContext) {
	if _, ok := bindCtx.Extensions[PluginName].(*bindExtension); !ok {
		return
	}
	pod := bindCtx.TaskInfo.Pod
	p.shared.Inflight.Forget(pod.UID)
	klog.FromContext(ctx).V(4).Info("Forgot GPU booking of a failed bind", "pod", klog.KObj(pod))
}
