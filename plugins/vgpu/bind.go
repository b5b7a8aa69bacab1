package vgpu

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
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
	value      string // encoded, as PreBind writes it
	err        error  // encoding failed: PreBind refuses the bind
}

// SetupBindContextExtension is called in the session goroutine when the
// task's gang has committed and the task is dispatched for binding. The
// booking is recorded here, not in PreBind: Volcano's cache already shows the
// pod on its node, and the next session may open before the bind goroutine
// runs PreBind; from now on it sees these GPUs as taken.
func (p *plugin) SetupBindContextExtension(_ *k8sframework.CycleState, bindCtx *cache.BindContext) {
	task := bindCtx.TaskInfo
	pl, ok := p.booked[task.UID]
	if !ok {
		return
	}
	a := toAssignment(pl, string(task.Pod.UID))
	a.Time = p.shared.Now()
	value, err := api.EncodeAssignment(a)
	ext := &bindExtension{assignment: a, value: value, err: err}
	if err == nil {
		p.shared.Inflight.Put(task.Pod.UID, a, value)
		// Volcano's binder copies the task's pod annotations into the
		// Binding, and kube-apiserver applies them to the pod: an earlier
		// assignment still on the cached pod (a bind that never landed) would
		// overwrite the one PreBind writes. The task's pod (a copy: the
		// informer's object is shared) carries this decision instead.
		pod := *task.Pod
		pod.Annotations = maps.Clone(task.Pod.Annotations)
		if pod.Annotations == nil {
			pod.Annotations = map[string]string{}
		}
		pod.Annotations[api.AssignmentKey] = value
		task.Pod = &pod
	}
	bindCtx.Extensions[PluginName] = ext
}

// PreBind writes the assignment on the pod right before it is bound.
func (p *plugin) PreBind(ctx context.Context, bindCtx *cache.BindContext) error {
	ext, ok := bindCtx.Extensions[PluginName].(*bindExtension)
	if !ok {
		return nil
	}
	pod := bindCtx.TaskInfo.Pod
	if ext.err != nil {
		return fmt.Errorf("vgpu: encode assignment of %s/%s: %w", pod.Namespace, pod.Name, ext.err)
	}
	if err := p.patchAssignment(ctx, pod, &ext.value); err != nil {
		p.shared.Inflight.Forget(pod.UID)
		return fmt.Errorf("vgpu: write assignment on %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	klog.FromContext(ctx).V(4).Info("Wrote GPU assignment", "pod", klog.KObj(pod), "node", ext.assignment.Node)
	return nil
}

// PreBindRollBack removes the assignment when PreBind or the bind failed.
func (p *plugin) PreBindRollBack(ctx context.Context, bindCtx *cache.BindContext) {
	if _, ok := bindCtx.Extensions[PluginName].(*bindExtension); !ok {
		return
	}
	pod := bindCtx.TaskInfo.Pod
	p.shared.Inflight.Forget(pod.UID)
	if err := p.patchAssignment(ctx, pod, nil); err != nil {
		klog.FromContext(ctx).Error(err, "Removing GPU assignment after a failed bind", "pod", klog.KObj(pod))
	}
}

// patchAssignment sets (value != nil) or removes the assignment annotation.
// The pod's UID in the patch is a precondition: a pod deleted and recreated
// under the same name is never annotated with another pod's GPUs.
func (p *plugin) patchAssignment(ctx context.Context, pod *corev1.Pod, value *string) error {
	patch, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"uid": pod.UID, "annotations": map[string]any{api.AssignmentKey: value}},
	})
	if err != nil {
		return err
	}
	_, err = p.kube.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.MergePatchType, patch, metav1.PatchOptions{})
	return err
}
