package vgpu

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/util/workqueue"

	"github.com/volcano-vgpu/volcano-vgpu/api"
)

func TestFitMemoForgetsWhatBookingsChange(t *testing.T) {
	// One A100 (81920 MiB). Pods a and b (different jobs) ask 60000 MiB each:
	// b fits until a is allocated (21920 MiB left), and again once a is
	// discarded. A memo not forgotten on the booking would keep saying it fits.
	h := newHandSession(t, nil, DefaultArgs(), []*corev1.Node{newGPUNode("n1", "NVIDIA A100-SXM4-80GB", 1, 81920).obj(t)},
		[]*corev1.Pod{gpuPod("ns", "a", "pga", 1, 60000, 10), gpuPod("ns", "b", "pgb", 1, 60000, 10)})
	node := h.nodeList()[0]
	steps := []struct {
		name    string
		do      func() error
		wantFit bool
	}{
		{"before any booking", func() error { return nil }, true},
		{"after a is allocated", func() error { return allocateOn(h, "a", "n1").Err }, false},
		{"after a is discarded", func() error { discard(h, "a"); return nil }, true},
	}
	for _, s := range steps {
		if err := s.do(); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		if err := h.plugin.predicate(h.tasks["b"], node); (err == nil) != s.wantFit {
			t.Errorf("%s: predicate of b = %v, want fit %t", s.name, err, s.wantFit)
		}
	}
}

func TestFitMemoKeepsShapesApart(t *testing.T) {
	// One A100 (81920 MiB): small (8192 MiB) fits, big (90000 MiB) does not,
	// asked alternately on one node state. Shapes are numbered per session:
	// two numbers for two shapes, the same one for the same shape.
	h := newHandSession(t, nil, DefaultArgs(), []*corev1.Node{newGPUNode("n1", "NVIDIA A100-SXM4-80GB", 1, 81920).obj(t)},
		[]*corev1.Pod{gpuPod("ns", "small", "pgs", 1, 8192, 10), gpuPod("ns", "big", "pgb", 1, 90000, 10),
			gpuPod("ns", "small2", "pgs2", 1, 8192, 10)})
	node := h.nodeList()[0]
	for _, tc := range []struct {
		pod     string
		wantFit bool
	}{{"small", true}, {"big", false}, {"small2", true}, {"big", false}} {
		if err := h.plugin.predicate(h.tasks[tc.pod], node); (err == nil) != tc.wantFit {
			t.Errorf("predicate of %s = %v, want fit %t", tc.pod, err, tc.wantFit)
		}
	}
	small, big, small2 := h.plugin.parsed(h.tasks["small"]), h.plugin.parsed(h.tasks["big"]), h.plugin.parsed(h.tasks["small2"])
	if small.fitShape == big.fitShape || small.fitShape != small2.fitShape {
		t.Errorf("shape numbers small %d, big %d, small2 %d: want small = small2 ≠ big", small.fitShape, big.fitShape, small2.fitShape)
	}
}

func TestFitMemoKeepsContainerNames(t *testing.T) {
	// Pods a ("main") and b ("worker") ask the same GPU shape; each booking
	// names its own container, or the device plugin cannot match it.
	b := gpuPod("ns", "b", "pgb", 1, 1024, 10)
	b.Spec.Containers[0].Name = "worker"
	h := newHandSession(t, nil, DefaultArgs(), []*corev1.Node{newGPUNode("n1", "NVIDIA L4", 2, 23034).obj(t)},
		[]*corev1.Pod{gpuPod("ns", "a", "pga", 1, 1024, 10), b})
	node := h.nodeList()[0]
	for _, name := range []string{"a", "b"} {
		if err := h.plugin.predicate(h.tasks[name], node); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"b", "a"} {
		if ev := allocateOn(h, name, "n1"); ev.Err != nil {
			t.Fatal(ev.Err)
		}
	}
	got := map[string]string{}
	for _, name := range []string{"a", "b"} {
		got[name] = h.plugin.booked[h.tasks[name].UID].Containers[0].Name
	}
	if d := cmp.Diff(map[string]string{"a": "main", "b": "worker"}, got); d != "" {
		t.Errorf("booked container names (-want +got):\n%s", d)
	}
}

func TestFitMemoKeepsGangsApart(t *testing.T) {
	// n1: GPU 0 holds 40000 MiB of job x (the fullest: binpack's pick without
	// a gang); gang a has a running task on GPU 2, gang d one on GPU 3. Their
	// pending tasks ask the same shape; each must join its own sibling
	// (gang affinity outranks fullness), not share one memo answer.
	running := func(name, group, uuid string, mem int64) *corev1.Pod {
		return newPod("ns", name).group(group).gpus(1, mem, 25).on("n1", corev1.PodRunning).
			assigned(t, api.DeviceShare{UUID: uuid, MemoryMiB: mem, Cores: 25}).obj()
	}
	h := newHandSession(t, nil, DefaultArgs(), []*corev1.Node{newGPUNode("n1", "NVIDIA A100-SXM4-80GB", 4, 81920).obj(t)},
		[]*corev1.Pod{
			running("x0", "x", "GPU-n1-0", 40000),
			running("a0", "a", "GPU-n1-2", 20000), gpuPod("ns", "a1", "a", 1, 20000, 25),
			running("d0", "d", "GPU-n1-3", 20000), gpuPod("ns", "d1", "d", 1, 20000, 25),
		})
	list := h.nodeList()
	got := map[string][]string{}
	for _, name := range []string{"a1", "d1"} {
		task := h.tasks[name]
		if err := h.plugin.predicate(task, list[0]); err != nil {
			t.Fatal(err)
		}
		if scores, _ := h.plugin.batchNodeOrder(task, list); len(scores) != 1 {
			t.Fatalf("%s scored on %v", name, scores)
		}
	}
	for _, name := range []string{"a1", "d1"} {
		if ev := allocateOn(h, name, "n1"); ev.Err != nil {
			t.Fatal(ev.Err)
		}
		got[name] = h.plugin.booked[h.tasks[name].UID].UUIDs()
	}
	if d := cmp.Diff(map[string][]string{"a1": {"GPU-n1-2"}, "d1": {"GPU-n1-3"}}, got); d != "" {
		t.Errorf("GPUs of the gangs' pending tasks (-want +got):\n%s", d)
	}
}

func TestPredicatesInParallel(t *testing.T) {
	// Volcano predicates one task on all nodes from 16 goroutines
	// (workqueue.ParallelizeUntil); run with -race. The answers equal those
	// of one goroutine on a fresh session.
	nodes, pods := benchCluster(t, 40)
	var tasks []string
	for i, shape := range []struct{ number, mem, cores int64 }{{1, 20000, 25}, {2, 40000, 50}, {4, 70000, 100}, {1, 70000, 30}} {
		for j := range 3 {
			name := string(rune('a'+i)) + string(rune('0'+j))
			tasks = append(tasks, name)
			pods = append(pods, gpuPod("ns", name, "pg"+name, shape.number, shape.mem, shape.cores))
		}
	}
	answers := func(h *handSession, parallel bool) map[string]bool {
		list := h.nodeList()
		out := make([]bool, len(tasks)*len(list))
		for ti, name := range tasks {
			check := func(i int) { out[ti*len(list)+i] = h.plugin.predicate(h.tasks[name], list[i]) == nil }
			if parallel {
				workqueue.ParallelizeUntil(t.Context(), 16, len(list), check)
			} else {
				for i := range list {
					check(i)
				}
			}
		}
		m := map[string]bool{}
		for ti, name := range tasks {
			for i, n := range list {
				m[name+"@"+n.Name] = out[ti*len(list)+i]
			}
		}
		return m
	}
	want := answers(newHandSession(t, nil, DefaultArgs(), nodes, pods), false)
	h := newHandSession(t, nil, DefaultArgs(), nodes, pods)
	for range 3 { // the first round fills the memo, the next ones read it
		if d := cmp.Diff(want, answers(h, true)); d != "" {
			t.Fatalf("parallel predicates (-sequential +parallel):\n%s", d)
		}
	}
}
