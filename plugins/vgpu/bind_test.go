package vgpu

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	schedapi "volcano.sh/volcano/pkg/scheduler/api"
	"volcano.sh/volcano/pkg/scheduler/cache"

	"github.com/volcano-vgpu/volcano-vgpu/api"
	"github.com/volcano-vgpu/volcano-vgpu/plugins/placement"
)

// apiServer is a fake clientset holding pods that, like the API server,
// refuses a patch changing metadata.uid (ValidateObjectMetaUpdate: the field
// is immutable). client-go's object tracker does not check it by itself.
func apiServer(t *testing.T, pods ...*corev1.Pod) *fake.Clientset {
	t.Helper()
	objs := make([]runtime.Object, len(pods))
	for i, p := range pods {
		objs[i] = p
	}
	cs := fake.NewClientset(objs...)
	cs.PrependReactor("patch", "pods", func(action k8stesting.Action) (bool, runtime.Object, error) {
		pa := action.(k8stesting.PatchAction)
		var patch struct {
			Metadata struct {
				UID types.UID `json:"uid"`
			} `json:"metadata"`
		}
		if err := json.Unmarshal(pa.GetPatch(), &patch); err != nil {
			return true, nil, apierrors.NewBadRequest(err.Error())
		}
		cur, err := cs.Tracker().Get(corev1.SchemeGroupVersion.WithResource("pods"), pa.GetNamespace(), pa.GetName())
		if err != nil {
			return true, nil, err
		}
		if uid := cur.(*corev1.Pod).UID; patch.Metadata.UID != "" && patch.Metadata.UID != uid {
			return true, nil, apierrors.NewInvalid(corev1.SchemeGroupVersion.WithKind("Pod").GroupKind(), pa.GetName(),
				field.ErrorList{field.Invalid(field.NewPath("metadata", "uid"), patch.Metadata.UID, "field is immutable")})
		}
		return false, nil, nil
	})
	return cs
}

// bindFixture is a plugin that booked pod "ns/p" on GPU-n1-2 and the bind
// context Volcano hands its PreBinders for that pod.
func bindFixture(t *testing.T, server *corev1.Pod) (*plugin, *cache.BindContext, *fake.Clientset) {
	t.Helper()
	pod := newPod("ns", "p").group("pg").gpus(1, 8192, 25).on("n1", corev1.PodPending).obj()
	cs := apiServer(t, server)
	p := &plugin{shared: NewShared(func() time.Time { return testNow }), kube: cs,
		booked: map[schedapi.TaskID]placement.Placement{schedapi.TaskID(pod.UID): {Node: "n1", Containers: []placement.ContainerPlacement{
			{Name: "main", Devices: []placement.Device{{Pos: 2, UUID: "GPU-n1-2", MemoryMiB: 8192, Cores: 25}}},
		}}}}
	bindCtx := &cache.BindContext{TaskInfo: schedapi.NewTaskInfo(pod), Extensions: map[string]cache.BindContextExtension{}}
	p.SetupBindContextExtension(nil, bindCtx)
	return p, bindCtx, cs
}

func serverPod(t *testing.T, cs *fake.Clientset) *corev1.Pod {
	t.Helper()
	pod, err := cs.CoreV1().Pods("ns").Get(context.Background(), "p", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return pod
}

func TestPreBindAnnotatesOnlyTheDecidedPod(t *testing.T) {
	tests := []struct {
		name      string
		serverUID types.UID
		wantErr   bool
	}{
		{name: "same pod", serverUID: "ns-p"},
		{name: "pod recreated under the same name", serverUID: "ns-p-recreated", wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			server := newPod("ns", "p").group("pg").obj()
			server.UID = tc.serverUID
			p, bindCtx, cs := bindFixture(t, server)
			err := p.PreBind(context.Background(), bindCtx)
			if (err != nil) != tc.wantErr {
				t.Fatalf("PreBind err = %v, want error %t", err, tc.wantErr)
			}
			got := serverPod(t, cs)
			value, annotated := got.Annotations[api.AssignmentKey]
			_, inflight := p.shared.Inflight.Get("ns-p")
			if tc.wantErr {
				if annotated || inflight || got.UID != tc.serverUID {
					t.Errorf("recreated pod: annotated %t, in flight %t, UID %s", annotated, inflight, got.UID)
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
			if !inflight {
				t.Error("no in-flight record for the annotated pod")
			}
		})
	}
}

func TestPreBindRollBackRemovesTheAssignment(t *testing.T) {
	p, bindCtx, cs := bindFixture(t, newPod("ns", "p").group("pg").obj())
	if err := p.PreBind(context.Background(), bindCtx); err != nil {
		t.Fatal(err)
	}
	p.PreBindRollBack(context.Background(), bindCtx)
	got := serverPod(t, cs)
	if v, ok := got.Annotations[api.AssignmentKey]; ok {
		t.Errorf("assignment left after rollback: %s", v)
	}
	if got.Annotations["scheduling.k8s.io/group-name"] != "pg" {
		t.Errorf("rollback touched other annotations: %v", got.Annotations)
	}
	if _, ok := p.shared.Inflight.Get("ns-p"); ok {
		t.Error("in-flight record left after rollback")
	}
}

func TestPreBindSkipsPodsWithoutGPUs(t *testing.T) {
	// A task the plugin did not book (no GPUs) gets no extension, and PreBind
	// and PreBindRollBack then leave the pod alone.
	server := newPod("ns", "p").group("pg").obj()
	p, _, cs := bindFixture(t, server)
	bindCtx := &cache.BindContext{TaskInfo: schedapi.NewTaskInfo(newPod("ns", "cpu").obj()), Extensions: map[string]cache.BindContextExtension{}}
	p.SetupBindContextExtension(nil, bindCtx)
	if len(bindCtx.Extensions) != 0 {
		t.Fatalf("extension for an unbooked task: %v", bindCtx.Extensions)
	}
	cs.ClearActions()
	if err := p.PreBind(context.Background(), bindCtx); err != nil {
		t.Fatal(err)
	}
	p.PreBindRollBack(context.Background(), bindCtx)
	if acts := cs.Actions(); len(acts) != 0 {
		t.Errorf("API calls for a pod without GPUs: %v", acts)
	}
}

func TestBookingVisibleToASessionOpenedBeforePreBind(t *testing.T) {
	// Session 1 commits pod p onto GPU-n1-2 (8192 MiB) and dispatches it;
	// Volcano's cache now lists p on n1 without an annotation. Session 2 opens
	// before the bind goroutine runs PreBind: it must see the GPU booked.
	server := newPod("ns", "p").group("pg").obj()
	p1, bindCtx, cs := bindFixture(t, server)
	node := newGPUNode("n1", "NVIDIA A100-SXM4-80GB", 4, 81920).obj(t)
	dispatched := newPod("ns", "p").group("pg").gpus(1, 8192, 25).on("n1", corev1.PodPending).obj()
	h := newHandSession(t, p1.shared, DefaultArgs(), []*corev1.Node{node}, []*corev1.Pod{dispatched})
	if got := h.plugin.nodes["n1"].GPUs[2]; got.UsedMemoryMiB != 8192 || got.UsedCores != 25 {
		t.Fatalf("session opened between commit and PreBind sees GPU-n1-2 with %d MiB, %d cores booked; want 8192, 25",
			got.UsedMemoryMiB, got.UsedCores)
	}
	if err := p1.PreBind(context.Background(), bindCtx); err != nil {
		t.Fatal(err)
	}
	if _, ok := serverPod(t, cs).Annotations[api.AssignmentKey]; !ok {
		t.Error("PreBind wrote no assignment")
	}
}

func TestBookingInFlightBeatsAStaleAnnotation(t *testing.T) {
	// A scheduler killed between PreBind and the Binding leaves pod p pending
	// with its assignment on GPU-n1-0. The next scheduler commits p onto
	// GPU-n1-2; a session opened before its PreBind lands sees p on n1 still
	// carrying the old annotation. It must book GPU-n1-2 (in flight), not
	// GPU-n1-0, or GPU-n1-2 looks free and is booked twice.
	server := newPod("ns", "p").group("pg").obj()
	p1, bindCtx, _ := bindFixture(t, server)
	node := newGPUNode("n1", "NVIDIA A100-SXM4-80GB", 4, 81920).obj(t)
	stale := newPod("ns", "p").group("pg").gpus(1, 8192, 25).on("n1", corev1.PodPending).
		assigned(t, api.DeviceShare{UUID: "GPU-n1-0", MemoryMiB: 8192, Cores: 25}).obj()
	h := newHandSession(t, p1.shared, DefaultArgs(), []*corev1.Node{node}, []*corev1.Pod{stale})
	if g0, g2 := h.plugin.nodes["n1"].GPUs[0], h.plugin.nodes["n1"].GPUs[2]; g0.UsedMemoryMiB != 0 || g2.UsedMemoryMiB != 8192 {
		t.Fatalf("with a stale annotation on GPU-n1-0 and GPU-n1-2 in flight: booked %d MiB on GPU-n1-0, %d on GPU-n1-2; want 0 and 8192",
			g0.UsedMemoryMiB, g2.UsedMemoryMiB)
	}
	if _, ok := p1.shared.Inflight.Get("ns-p"); !ok {
		t.Fatal("the in-flight record was dropped on seeing the stale annotation")
	}
	// PreBind lands: the pod carries the decision in flight, which is then forgotten.
	if err := p1.PreBind(context.Background(), bindCtx); err != nil {
		t.Fatal(err)
	}
	current := stale.DeepCopy()
	current.Annotations[api.AssignmentKey] = bindCtx.Extensions[PluginName].(*bindExtension).value
	h = newHandSession(t, p1.shared, DefaultArgs(), []*corev1.Node{node}, []*corev1.Pod{current})
	if g2 := h.plugin.nodes["n1"].GPUs[2]; g2.UsedMemoryMiB != 8192 {
		t.Errorf("after PreBind landed: %d MiB booked on GPU-n1-2, want 8192", g2.UsedMemoryMiB)
	}
	if _, ok := p1.shared.Inflight.Get("ns-p"); ok {
		t.Error("the in-flight record outlived the annotation that carries it")
	}
}

func TestBindingCarriesThisDecision(t *testing.T) {
	// Volcano's binder sends the task's pod annotations in the Binding and
	// kube-apiserver applies them: a stale assignment on the cached pod must
	// not travel there, and the informer's pod object must stay untouched.
	stale := newPod("ns", "p").group("pg").gpus(1, 8192, 25).on("n0", corev1.PodPending).
		assigned(t, api.DeviceShare{UUID: "GPU-n1-0", MemoryMiB: 8192, Cores: 25}).obj()
	cached := stale.Annotations[api.AssignmentKey]
	p := &plugin{shared: NewShared(func() time.Time { return testNow }),
		booked: map[schedapi.TaskID]placement.Placement{schedapi.TaskID(stale.UID): {Node: "n1", Containers: []placement.ContainerPlacement{
			{Name: "main", Devices: []placement.Device{{Pos: 2, UUID: "GPU-n1-2", MemoryMiB: 8192, Cores: 25}}},
		}}}}
	bindCtx := &cache.BindContext{TaskInfo: schedapi.NewTaskInfo(stale), Extensions: map[string]cache.BindContextExtension{}}
	p.SetupBindContextExtension(nil, bindCtx)
	got, err := api.DecodeAssignment(bindCtx.TaskInfo.Pod.Annotations[api.AssignmentKey])
	if err != nil {
		t.Fatal(err)
	}
	if uuids(got)[0] != "GPU-n1-2" {
		t.Errorf("the pod Volcano binds carries GPUs %v, want this decision's GPU-n1-2", uuids(got))
	}
	if stale.Annotations[api.AssignmentKey] != cached {
		t.Error("the informer's pod object was changed")
	}
}
