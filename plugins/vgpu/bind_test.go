package vgpu

import (
	"context"
	"fmt"
	"maps"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"
	schedapi "volcano.sh/volcano/pkg/scheduler/api"
	"volcano.sh/volcano/pkg/scheduler/cache"

	"github.com/volcano-vgpu/volcano-vgpu/api"
	"github.com/volcano-vgpu/volcano-vgpu/plugins/placement"
)

// apiServer is a fake clientset holding pods whose pods/binding subresource
// behaves like kube-apiserver's binding storage: the Binding's UID is a
// precondition (a pod recreated under the same name is a conflict), a pod
// already on a node or being deleted is refused, and on success the pod gets
// spec.nodeName and the Binding's annotations in one update. client-go's
// object tracker does none of this by itself.
func apiServer(t *testing.T, pods ...*corev1.Pod) *fake.Clientset {
	t.Helper()
	objs := make([]runtime.Object, len(pods))
	for i, p := range pods {
		objs[i] = p
	}
	cs := fake.NewClientset(objs...)
	gvr := corev1.SchemeGroupVersion.WithResource("pods")
	cs.PrependReactor("create", "pods", func(action k8stesting.Action) (bool, runtime.Object, error) {
		if action.GetSubresource() != "binding" {
			return false, nil, nil
		}
		b := action.(k8stesting.CreateAction).GetObject().(*corev1.Binding)
		obj, err := cs.Tracker().Get(gvr, b.Namespace, b.Name)
		if err != nil {
			return true, nil, err
		}
		pod := obj.(*corev1.Pod).DeepCopy()
		switch {
		case b.UID != "" && b.UID != pod.UID:
			return true, nil, apierrors.NewConflict(gvr.GroupResource(), b.Name,
				fmt.Errorf("Precondition failed: UID in precondition: %s, UID in object meta: %s", b.UID, pod.UID))
		case pod.DeletionTimestamp != nil:
			return true, nil, apierrors.NewConflict(gvr.GroupResource(), b.Name, fmt.Errorf("pod %s is being deleted, cannot be assigned to a host", b.Name))
		case pod.Spec.NodeName != "":
			return true, nil, apierrors.NewConflict(gvr.GroupResource(), b.Name, fmt.Errorf("pod %v is already assigned to node %q", b.Name, pod.Spec.NodeName))
		}
		pod.Spec.NodeName = b.Target.Name
		if pod.Annotations == nil {
			pod.Annotations = map[string]string{}
		}
		maps.Copy(pod.Annotations, b.Annotations)
		return true, nil, cs.Tracker().Update(gvr, pod, pod.Namespace)
	})
	return cs
}

// bookedOnGPU2 is the placement fixture: pod's main container on GPU-n1-2
// with 8192 MiB and 25 % of its cores.
func bookedOnGPU2(pod *corev1.Pod) map[schedapi.TaskID]placement.Placement {
	return map[schedapi.TaskID]placement.Placement{schedapi.TaskID(pod.UID): {Node: "n1", Containers: []placement.ContainerPlacement{
		{Name: "main", Devices: []placement.Device{{Pos: 2, UUID: "GPU-n1-2", MemoryMiB: 8192, Cores: 25}}},
	}}}
}

// bindFixture is a plugin that booked pod "ns/p" on GPU-n1-2 and the bind
// context Volcano hands its PreBinders for that pod, dispatched to n1.
func bindFixture(t *testing.T) (*plugin, *cache.BindContext) {
	t.Helper()
	pod := newPod("ns", "p").group("pg").gpus(1, 8192, 25).obj()
	p := &plugin{shared: NewShared(func() time.Time { return testNow }), booked: bookedOnGPU2(pod)}
	task := schedapi.NewTaskInfo(pod)
	task.NodeName = "n1"
	bindCtx := &cache.BindContext{TaskInfo: task, Extensions: map[string]cache.BindContextExtension{}}
	p.SetupBindContextExtension(nil, bindCtx)
	return p, bindCtx
}

// bind runs what Volcano's bind goroutine runs for one task: the PreBinder,
// Volcano's own default binder (which sends the task's pod annotations in
// the Binding), and the rollback on failure.
func bind(t *testing.T, p *plugin, bindCtx *cache.BindContext, cs *fake.Clientset) error {
	t.Helper()
	ctx := context.Background()
	if err := p.PreBind(ctx, bindCtx); err != nil {
		return err
	}
	binder := cache.NewDefaultBinder(cs, record.NewFakeRecorder(10))
	if errs := binder.Bind(cs, []*schedapi.TaskInfo{bindCtx.TaskInfo}); len(errs) > 0 {
		p.PreBindRollBack(ctx, bindCtx)
		return fmt.Errorf("%v", errs)
	}
	return nil
}

func serverPod(t *testing.T, cs *fake.Clientset) *corev1.Pod {
	t.Helper()
	pod, err := cs.CoreV1().Pods("ns").Get(context.Background(), "p", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return pod
}

func TestBindingCarriesTheAssignment(t *testing.T) {
	tests := []struct {
		name      string
		serverUID types.UID
		bound     bool // the server's pod is already on a node
		wantErr   bool
	}{
		{name: "same pod", serverUID: "ns-p"},
		{name: "pod recreated under the same name", serverUID: "ns-p-recreated", wantErr: true},
		{name: "pod bound meanwhile by another scheduler", serverUID: "ns-p", bound: true, wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			server := newPod("ns", "p").group("pg").obj()
			server.UID = tc.serverUID
			if tc.bound {
				server.Spec.NodeName = "n9"
			}
			cs := apiServer(t, server)
			p, bindCtx := bindFixture(t)
			err := bind(t, p, bindCtx, cs)
			if (err != nil) != tc.wantErr {
				t.Fatalf("bind err = %v, want error %t", err, tc.wantErr)
			}
			got := serverPod(t, cs)
			value, annotated := got.Annotations[api.AssignmentKey]
			_, inflight := p.shared.Inflight.Get("ns-p")
			if tc.wantErr {
				// The Binding never landed: nothing on the pod, no booking kept.
				if annotated || inflight || got.UID != tc.serverUID {
					t.Errorf("failed bind: annotated %t, in flight %t, UID %s", annotated, inflight, got.UID)
				}
				return
			}
			a, err := api.DecodeAssignment(value)
			if err != nil {
				t.Fatalf("annotation %q: %v", value, err)
			}
			want := api.Assignment{Version: api.Version, PodUID: "ns-p", Node: "n1", Time: testNow, Phase: api.PhaseAssigned,
				Containers: []api.ContainerAssignment{{Name: "main", Devices: []api.DeviceShare{{UUID: "GPU-n1-2", MemoryMiB: 8192, Cores: 25}}}}}
			if d := cmp.Diff(want, a); d != "" {
				t.Errorf("assignment (-want +got):\n%s", d)
			}
			if got.Spec.NodeName != "n1" || got.Annotations["scheduling.k8s.io/group-name"] != "pg" {
				t.Errorf("bound pod: node %q, annotations %v", got.Spec.NodeName, got.Annotations)
			}
			if !inflight {
				t.Error("no in-flight record for the bound pod (kept until the informer shows its annotation)")
			}
		})
	}
}

func TestBindIsOneAPIWrite(t *testing.T) {
	// A GPU pod costs the Binding and nothing else; a pod the plugin did not
	// book (no GPUs) gets no extension and is bound as Volcano would anyway.
	for _, gpu := range []bool{true, false} {
		t.Run(fmt.Sprintf("gpu=%t", gpu), func(t *testing.T) {
			cs := apiServer(t, newPod("ns", "p").group("pg").obj())
			p, bindCtx := bindFixture(t)
			if !gpu {
				task := schedapi.NewTaskInfo(newPod("ns", "p").group("pg").obj())
				task.UID = "cpu-task"
				task.NodeName = "n1"
				bindCtx = &cache.BindContext{TaskInfo: task, Extensions: map[string]cache.BindContextExtension{}}
				p.SetupBindContextExtension(nil, bindCtx)
				if len(bindCtx.Extensions) != 0 {
					t.Fatalf("extension for an unbooked task: %v", bindCtx.Extensions)
				}
			}
			if err := bind(t, p, bindCtx, cs); err != nil {
				t.Fatal(err)
			}
			var verbs []string
			for _, a := range cs.Actions() {
				verbs = append(verbs, a.GetVerb()+" "+a.GetResource().Resource+"/"+a.GetSubresource())
			}
			if d := cmp.Diff([]string{"create pods/binding"}, verbs); d != "" {
				t.Errorf("API calls (-want +got):\n%s", d)
			}
			if _, annotated := serverPod(t, cs).Annotations[api.AssignmentKey]; annotated != gpu {
				t.Errorf("assignment on the bound pod: %t, want %t", annotated, gpu)
			}
		})
	}
}

func TestPreBindRefusesAnUnencodableAssignment(t *testing.T) {
	// A booking with no GPU UUID cannot be encoded: binding the pod without
	// an assignment would leave the device plugin nothing to serve.
	pod := newPod("ns", "p").group("pg").gpus(1, 8192, 25).obj()
	booked := bookedOnGPU2(pod)
	booked[schedapi.TaskID(pod.UID)].Containers[0].Devices[0].UUID = ""
	p := &plugin{shared: NewShared(func() time.Time { return testNow }), booked: booked}
	bindCtx := &cache.BindContext{TaskInfo: schedapi.NewTaskInfo(pod), Extensions: map[string]cache.BindContextExtension{}}
	p.SetupBindContextExtension(nil, bindCtx)
	cs := apiServer(t, newPod("ns", "p").group("pg").obj())
	if err := bind(t, p, bindCtx, cs); err == nil {
		t.Fatal("bind with an unencodable assignment succeeded")
	}
	if p.shared.Inflight.Len() != 0 || len(cs.Actions()) != 0 {
		t.Errorf("refused bind left %d in-flight records and made API calls %v", p.shared.Inflight.Len(), cs.Actions())
	}
}

func TestBookingVisibleToASessionOpenedBeforeTheBinding(t *testing.T) {
	// Session 1 commits pod p onto GPU-n1-2 (8192 MiB) and dispatches it;
	// Volcano's cache now lists p on n1 without an annotation. Session 2 opens
	// before the Binding lands: it must see the GPU booked. Session 3 sees the
	// bound pod with its annotation, and the in-flight record goes.
	p1, bindCtx := bindFixture(t)
	cs := apiServer(t, newPod("ns", "p").group("pg").obj())
	node := newGPUNode("n1", "NVIDIA A100-SXM4-80GB", 4, 81920).obj(t)
	dispatched := newPod("ns", "p").group("pg").gpus(1, 8192, 25).on("n1", corev1.PodPending).obj()
	h := newHandSession(t, p1.shared, DefaultArgs(), []*corev1.Node{node}, []*corev1.Pod{dispatched})
	if got := h.plugin.nodes["n1"].GPUs[2]; got.UsedMemoryMiB != 8192 || got.UsedCores != 25 {
		t.Fatalf("session opened between commit and Binding sees GPU-n1-2 with %d MiB, %d cores booked; want 8192, 25",
			got.UsedMemoryMiB, got.UsedCores)
	}
	if err := bind(t, p1, bindCtx, cs); err != nil {
		t.Fatal(err)
	}
	bound := dispatched.DeepCopy()
	bound.Annotations = serverPod(t, cs).Annotations
	h = newHandSession(t, p1.shared, DefaultArgs(), []*corev1.Node{node}, []*corev1.Pod{bound})
	if got := h.plugin.nodes["n1"].GPUs[2]; got.UsedMemoryMiB != 8192 {
		t.Errorf("after the Binding: %d MiB booked on GPU-n1-2, want 8192", got.UsedMemoryMiB)
	}
	if p1.shared.Inflight.Len() != 0 {
		t.Error("the in-flight record outlived the annotation that carries it")
	}
}

func TestBookingInFlightBeatsAnotherAnnotation(t *testing.T) {
	// Pod p was created carrying an assignment on GPU-n1-0 (copied from
	// another manifest, or left by an older scheduler's failed bind). This
	// scheduler commits p onto GPU-n1-2; a session opened before the Binding
	// lands sees p on n1 still carrying the old annotation. It must book
	// GPU-n1-2 (in flight), not GPU-n1-0, or GPU-n1-2 looks free and is booked
	// twice. The Binding then replaces the annotation with this decision.
	p1, bindCtx := bindFixture(t)
	stale := newPod("ns", "p").group("pg").gpus(1, 8192, 25).on("n1", corev1.PodPending).
		assigned(t, api.DeviceShare{UUID: "GPU-n1-0", MemoryMiB: 8192, Cores: 25}).obj()
	server := stale.DeepCopy()
	server.Spec.NodeName = ""
	cs := apiServer(t, server)
	node := newGPUNode("n1", "NVIDIA A100-SXM4-80GB", 4, 81920).obj(t)
	h := newHandSession(t, p1.shared, DefaultArgs(), []*corev1.Node{node}, []*corev1.Pod{stale})
	if g0, g2 := h.plugin.nodes["n1"].GPUs[0], h.plugin.nodes["n1"].GPUs[2]; g0.UsedMemoryMiB != 0 || g2.UsedMemoryMiB != 8192 {
		t.Fatalf("with another annotation on GPU-n1-0 and GPU-n1-2 in flight: booked %d MiB on GPU-n1-0, %d on GPU-n1-2; want 0 and 8192",
			g0.UsedMemoryMiB, g2.UsedMemoryMiB)
	}
	if _, ok := p1.shared.Inflight.Get("ns-p"); !ok {
		t.Fatal("the in-flight record was dropped on seeing the other annotation")
	}
	if err := bind(t, p1, bindCtx, cs); err != nil {
		t.Fatal(err)
	}
	a, err := api.DecodeAssignment(serverPod(t, cs).Annotations[api.AssignmentKey])
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]string{"GPU-n1-2"}, uuids(a)); d != "" {
		t.Errorf("GPUs on the bound pod (-want +got):\n%s", d)
	}
}

func TestBindContextLeavesTheInformersPodAlone(t *testing.T) {
	// The task's pod is the informer's object, shared with every reader:
	// Volcano binds a copy carrying this decision, the original is untouched.
	pod := newPod("ns", "p").group("pg").gpus(1, 8192, 25).on("n0", corev1.PodPending).
		assigned(t, api.DeviceShare{UUID: "GPU-n1-0", MemoryMiB: 8192, Cores: 25}).obj()
	before := pod.DeepCopy()
	p := &plugin{shared: NewShared(func() time.Time { return testNow }), booked: bookedOnGPU2(pod)}
	bindCtx := &cache.BindContext{TaskInfo: schedapi.NewTaskInfo(pod), Extensions: map[string]cache.BindContextExtension{}}
	p.SetupBindContextExtension(nil, bindCtx)
	got, err := api.DecodeAssignment(bindCtx.TaskInfo.Pod.Annotations[api.AssignmentKey])
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]string{"GPU-n1-2"}, uuids(got)); d != "" {
		t.Errorf("GPUs of the pod Volcano binds (-want +got):\n%s", d)
	}
	if d := cmp.Diff(before, pod); d != "" {
		t.Errorf("the informer's pod object changed (-before +after):\n%s", d)
	}
}
