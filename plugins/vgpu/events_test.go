package vgpu

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	schedapi "volcano.sh/volcano/pkg/scheduler/api"
	"volcano.sh/volcano/pkg/scheduler/framework"

	"github.com/volcano-vgpu/volcano-vgpu/api"
	"github.com/volcano-vgpu/volcano-vgpu/plugins/placement"
)

// allocateOn runs the plugin's AllocateFunc as Volcano's Statement.Allocate
// does: the task is on node, status Allocated.
func allocateOn(h *handSession, name, node string) *framework.Event {
	task := h.tasks[name]
	task.NodeName, task.Status = node, schedapi.Allocated
	ev := &framework.Event{Task: task}
	h.plugin.allocate(ev)
	return ev
}

// discard runs the plugin's DeallocateFunc as Volcano's Statement.Discard
// does: the task is back to Pending (its node name stays, as Volcano leaves it).
func discard(h *handSession, name string) {
	task := h.tasks[name]
	task.Status = schedapi.Pending
	h.plugin.deallocate(&framework.Event{Task: task})
}

func TestAllocateRefusesWhatItCannotBook(t *testing.T) {
	// One L4 (23034 MiB): the first exclusive pod takes it; Volcano asking
	// for the second there (its state moved on since the predicate) must get
	// an error, so it rolls back rather than bind a pod with no assignment.
	h := newHandSession(t, nil, DefaultArgs(), []*corev1.Node{newGPUNode("n1", "NVIDIA L4", 1, 23034).obj(t)},
		[]*corev1.Pod{gpuPod("ns", "a", "pga", 1, 1024, 100), gpuPod("ns", "b", "pgb", 1, 1024, 100), newPod("ns", "cpu").group("pgc").obj()})
	if ev := allocateOn(h, "a", "n1"); ev.Err != nil {
		t.Fatalf("first pod: %v", ev.Err)
	}
	ev := allocateOn(h, "b", "n1")
	if ev.Err == nil || !strings.Contains(ev.Err.Error(), "no longer fit node n1") {
		t.Errorf("second exclusive pod on a held GPU: err = %v", ev.Err)
	}
	if _, ok := h.plugin.booked[h.tasks["b"].UID]; ok {
		t.Error("refused pod is booked")
	}
	if ev := allocateOn(h, "b", "ghost"); ev.Err == nil || !strings.Contains(ev.Err.Error(), "no GPU state") {
		t.Errorf("GPU pod on a node without GPU state: err = %v", ev.Err)
	}
	if ev := allocateOn(h, "cpu", "ghost"); ev.Err != nil {
		t.Errorf("CPU pod: err = %v", ev.Err)
	}
}

func TestEvictionUndoneRebooksTheSameGPUs(t *testing.T) {
	// A running pod holds GPU 3 exclusively. Preempt evicts it (Deallocate,
	// status Releasing) and then gives up (unevict: Allocate, status
	// Running). A fresh Fit would pick GPU 0 (binpack, all idle, lowest
	// position); the pod still holds GPU 3 and must be booked there again.
	victim := newPod("ns", "victim").group("pgv").gpus(1, 81920, 100).on("n1", corev1.PodRunning).
		assigned(t, api.DeviceShare{UUID: "GPU-n1-3", MemoryMiB: 81920, Cores: 100}).obj()
	h := newHandSession(t, nil, DefaultArgs(), []*corev1.Node{newGPUNode("n1", "A100-80GB", 4, 81920).obj(t)}, []*corev1.Pod{victim})
	p, task := h.plugin, h.tasks["victim"]
	before := p.nodes["n1"].Clone()

	task.Status = schedapi.Releasing
	p.deallocate(&framework.Event{Task: task})
	if g := p.nodes["n1"].GPUs[3]; g.UsedMemoryMiB != 0 || g.Exclusive != 0 {
		t.Fatalf("GPU-n1-3 still booked after the eviction: %+v", g)
	}
	task.Status = schedapi.Running
	ev := &framework.Event{Task: task}
	p.allocate(ev)
	if ev.Err != nil {
		t.Fatal(ev.Err)
	}
	if got := p.booked[task.UID].UUIDs(); !cmp.Equal(got, []string{"GPU-n1-3"}) {
		t.Errorf("rebooked on %v, want [GPU-n1-3]", got)
	}
	if d := cmp.Diff(before.GPUs, p.nodes["n1"].GPUs); d != "" {
		t.Errorf("node usage after evict+unevict (-before +after):\n%s", d)
	}
	if len(p.evicted) != 0 {
		t.Errorf("evicted records left: %v", p.evicted)
	}
}

func TestDiscardForgetsThePlacement(t *testing.T) {
	// A discarded allocation (status back to Pending) is not an eviction:
	// the next allocation of the task chooses afresh on its new node.
	h := newHandSession(t, nil, DefaultArgs(), []*corev1.Node{
		newGPUNode("n1", "A100-80GB", 2, 81920).obj(t), newGPUNode("n2", "A100-80GB", 2, 81920).obj(t),
	}, []*corev1.Pod{gpuPod("ns", "a", "pga", 1, 1024, 10)})
	p, task := h.plugin, h.tasks["a"]
	if ev := allocateOn(h, "a", "n1"); ev.Err != nil {
		t.Fatal(ev.Err)
	}
	task.Status = schedapi.Pending
	p.deallocate(&framework.Event{Task: task})
	if len(p.booked) != 0 || len(p.evicted) != 0 {
		t.Fatalf("after discard: booked %v, evicted %v", p.booked, p.evicted)
	}
	if ev := allocateOn(h, "a", "n2"); ev.Err != nil {
		t.Fatal(ev.Err)
	}
	if got := p.booked[task.UID]; got.Node != "n2" || !cmp.Equal(got.UUIDs(), []string{"GPU-n2-0"}) {
		t.Errorf("reallocated to %s %v, want n2 [GPU-n2-0]", got.Node, got.UUIDs())
	}
	for _, g := range p.nodes["n1"].GPUs {
		if g != (placement.GPU{Index: g.Index, UUID: g.UUID, Model: g.Model, MemoryMiB: g.MemoryMiB, Healthy: true, NUMA: g.NUMA, MaxShares: g.MaxShares, Mode: g.Mode}) {
			t.Errorf("n1 still carries usage: %+v", g)
		}
	}
}

func TestPredicateSaysWhetherEvictionCanHelp(t *testing.T) {
	// Preempt and reclaim skip nodes whose refusal is UnschedulableAndUnresolvable.
	full := newPod("ns", "full").group("pgf").gpus(1, 81920, 100).on("busy", corev1.PodRunning).
		assigned(t, api.DeviceShare{UUID: "GPU-busy-0", MemoryMiB: 81920, Cores: 100}).obj()
	nodes := []*corev1.Node{
		newGPUNode("busy", "A100-80GB", 1, 81920).obj(t),
		newGPUNode("stale", "A100-80GB", 1, 81920).heartbeat(testNow.Add(-time.Hour)).obj(t),
		newGPUNode("t4", "Tesla T4", 1, 15360).obj(t),
		newGPUNode("bare", "A100-80GB", 1, 81920).noInventory().obj(t),
	}
	pod := newPod("ns", "p").group("pgp").gpus(1, 8192, 10).annotate(api.GPUTypeIncludeKey, "A100").obj()
	h := newHandSession(t, nil, DefaultArgs(), nodes, []*corev1.Pod{full, pod})
	tests := []struct {
		node string
		want int
	}{
		{node: "busy", want: schedapi.Unschedulable}, // held exclusively: evicting the holder frees it
		{node: "stale", want: schedapi.UnschedulableAndUnresolvable},
		{node: "t4", want: schedapi.UnschedulableAndUnresolvable}, // filtered out by model
		{node: "bare", want: schedapi.UnschedulableAndUnresolvable},
	}
	for _, tc := range tests {
		t.Run(tc.node, func(t *testing.T) {
			err := h.plugin.predicate(h.tasks["p"], h.nodes[tc.node])
			fe, ok := err.(*schedapi.FitError)
			if !ok {
				t.Fatalf("predicate = %v, want a FitError", err)
			}
			for _, st := range fe.Status {
				if st.Code != tc.want {
					t.Errorf("status %q: code %d, want %d", st.Reason, st.Code, tc.want)
				}
			}
		})
	}
	bad := newPod("ns", "bad").group("pgb").gpus(1, 8192, 150).obj()
	h = newHandSession(t, nil, DefaultArgs(), nodes, []*corev1.Pod{bad})
	if err := h.plugin.prePredicate(h.tasks["bad"]); err == nil || !strings.Contains(err.Error(), "invalid vGPU request") {
		t.Errorf("prePredicate of an invalid request = %v", err)
	}
}

func TestEvictedPodKeepsItsGPUsUntilItIsGone(t *testing.T) {
	// A victim of preemption is being deleted (Releasing) but still runs on
	// its GPU: a later session must not hand that GPU to the preemptor yet.
	victim := newPod("ns", "victim").group("pgv").gpus(1, 81920, 100).on("n1", corev1.PodRunning).
		assigned(t, api.DeviceShare{UUID: "GPU-n1-0", MemoryMiB: 81920, Cores: 100}).obj()
	now := metav1.NewTime(testNow)
	victim.DeletionTimestamp = &now
	preemptor := gpuPod("ns", "p", "pgp", 1, 81920, 100)
	node := newGPUNode("n1", "A100-80GB", 1, 81920).obj(t)
	h := newHandSession(t, nil, DefaultArgs(), []*corev1.Node{node}, []*corev1.Pod{victim, preemptor})
	if err := h.plugin.predicate(h.tasks["p"], h.nodes["n1"]); err == nil {
		t.Fatal("the preemptor fits the GPU its victim still holds")
	}
	victim.Status.Phase = corev1.PodFailed // gone: its GPU is free
	h = newHandSession(t, nil, DefaultArgs(), []*corev1.Node{node}, []*corev1.Pod{victim, preemptor})
	if err := h.plugin.predicate(h.tasks["p"], h.nodes["n1"]); err != nil {
		t.Fatalf("the preemptor does not fit the GPU its victim left: %v", err)
	}
}
