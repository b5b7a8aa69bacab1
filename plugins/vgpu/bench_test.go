package vgpu

// Benchmarks of the adapter's hot paths at realistic sizes: 8-GPU nodes each
// running 10 pods with assignments. Multi-GPU set selection (N = 2, 4, 8 on
// 8 GPUs) is the placement core's BenchmarkFit; it is not repeated here.
//
//	go test -run '^$' -bench . -benchmem -benchtime=200x ./plugins/vgpu/
//	go test -run '^$' -bench SessionOpen -benchmem -benchtime=3x ./plugins/vgpu/

import (
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	schedapi "volcano.sh/volcano/pkg/scheduler/api"

	"github.com/volcano-vgpu/volcano-vgpu/api"
)

// benchCluster is size nodes × 8 A100-80GB (NVSwitch and NVLink-pair
// topologies alternating), each running 10 one-GPU pods with assignments:
// pod j of a node holds GPU j%8 with 4096·(1+j%4) MiB and 10+5·(j%3) % cores,
// so GPUs 0 and 1 have two tenants, the others one.
func benchCluster(b testing.TB, size int) ([]*corev1.Node, []*corev1.Pod) {
	b.Helper()
	nodes := make([]*corev1.Node, 0, size)
	pods := make([]*corev1.Pod, 0, size*10)
	for i := range size {
		name := fmt.Sprintf("n%05d", i)
		g := newGPUNode(name, "NVIDIA A100-SXM4-80GB", 8, 81920)
		if i%2 == 0 {
			g.nvswitch()
		} else {
			g.nvlinkPairs()
		}
		nodes = append(nodes, g.obj(b))
		for j := range 10 {
			mem, cores := int64(4096*(1+j%4)), 10+5*(j%3)
			pods = append(pods, newPod("ns", fmt.Sprintf("%s-p%d", name, j)).group(fmt.Sprintf("%s-pg%d", name, j)).
				gpus(1, mem, int64(cores)).on(name, corev1.PodRunning).
				assigned(b, api.DeviceShare{UUID: fmt.Sprintf("GPU-%s-%d", name, j%8), MemoryMiB: mem, Cores: cores}).obj())
		}
	}
	return nodes, pods
}

// BenchmarkPredicateScore is the per (task, node) cost of the plugin in a
// session over 100 busy nodes: the predicate on one node, and the batch
// score of all 100 (reported per node).
func BenchmarkPredicateScore(b *testing.B) {
	nodes, pods := benchCluster(b, 100)
	pending := []*corev1.Pod{
		gpuPod("ns", "one", "solo1", 1, 20000, 25),
		gpuPod("ns", "four", "solo4", 4, 20000, 25),
	}
	// A 4-task gang with one task placed on n00000 and two pending besides
	// the one being scored: the score simulates the pending ones (at most 32).
	for i := range 4 {
		pending = append(pending, gpuPod("ns", fmt.Sprintf("gang%d", i), "gang", 1, 20000, 25))
	}
	// A 512-task job, all pending: the gang view groups them by shape.
	for i := range 512 {
		pending = append(pending, gpuPod("ns", fmt.Sprintf("big%d", i), "big", 1, 4096, 5))
	}
	h := newHandSession(b, nil, DefaultArgs(), nodes, append(pods, pending...))
	if ev := allocateOn(h, "gang0", "n00000"); ev.Err != nil {
		b.Fatal(ev.Err)
	}
	list := h.nodeList()
	for _, tc := range []struct{ name, pod string }{{"1GPU", "one"}, {"4GPU", "four"}, {"1GPU-gang4", "gang1"}, {"1GPU-gang512", "big0"}} {
		task := h.tasks[tc.pod]
		b.Run("predicate/"+tc.name, func(b *testing.B) {
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if err := h.plugin.predicate(task, list[i%len(list)]); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
		b.Run("score-100nodes/"+tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if scores, _ := h.plugin.batchNodeOrder(task, list); len(scores) != len(list) {
					b.Fatalf("%d scores for %d nodes", len(scores), len(list))
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(len(list)), "ns/node")
		})
	}
}

// BenchmarkPredicateRefused is the predicate on a node where the task does
// not fit: the cost of building Volcano's fit error.
func BenchmarkPredicateRefused(b *testing.B) {
	nodes, pods := benchCluster(b, 1)
	h := newHandSession(b, meteredShared(), DefaultArgs(), nodes, append(pods, gpuPod("ns", "big", "big", 1, 204800, 10)))
	task, node := h.tasks["big"], h.nodeList()[0]
	b.ReportAllocs()
	for b.Loop() {
		if err := h.plugin.predicate(task, node); err == nil {
			b.Fatal("fits")
		}
	}
}

// BenchmarkSessionOpen rebuilds every node's GPU usage from inventories and
// assignments, as OnSessionOpen does: cold (a fresh process: every inventory
// decoded) and warm (the decode cache of the previous session).
func BenchmarkSessionOpen(b *testing.B) {
	now := func() time.Time { return testNow }
	for _, size := range []int{1000, 5000} {
		nodes, pods := benchCluster(b, size)
		h := newHandSession(b, nil, DefaultArgs(), nodes, pods)
		infos := h.nodes
		b.Run(fmt.Sprintf("%dnodes/cold", size), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				p := &plugin{shared: NewShared(now), args: DefaultArgs(), ok: true}
				p.buildState(infos, testNow)
				if len(p.booked) != size*10 {
					b.Fatalf("booked %d", len(p.booked))
				}
			}
		})
		b.Run(fmt.Sprintf("%dnodes/warm", size), func(b *testing.B) {
			shared := NewShared(now)
			(&plugin{shared: shared, args: DefaultArgs(), ok: true}).buildState(infos, testNow)
			shared.cache.sweep()
			b.ReportAllocs()
			for b.Loop() {
				p := &plugin{shared: shared, args: DefaultArgs(), ok: true}
				p.buildState(infos, testNow)
				shared.cache.sweep() // OnSessionClose
				if len(p.booked) != size*10 {
					b.Fatalf("booked %d", len(p.booked))
				}
			}
		})
	}
}

// BenchmarkPlaceTask is what one task costs the plugin in Volcano's allocate
// action over 100 busy nodes: the predicate on every node, the batch score
// of those that pass, and the allocate event on the best one, which changes
// that node for the next task. Each iteration places one of 64 pending
// tasks; once all are placed they are deallocated (a gang discard), so the
// cluster stays the same size across iterations. "jobs" are 64 one-task
// jobs, "gang" one job of 64 tasks (its view of siblings grows as it goes).
func BenchmarkPlaceTask(b *testing.B) {
	for _, tc := range []struct {
		name  string
		group func(i int) string
	}{
		{"jobs", func(i int) string { return fmt.Sprintf("solo%d", i) }},
		{"gang", func(int) string { return "gang" }},
	} {
		b.Run(tc.name, func(b *testing.B) {
			nodes, pods := benchCluster(b, 100)
			var names []string
			for i := range 64 {
				name := fmt.Sprintf("t%02d", i)
				names = append(names, name)
				pods = append(pods, gpuPod("ns", name, tc.group(i), 1, 20000, 25))
			}
			h := newHandSession(b, meteredShared(), DefaultArgs(), nodes, pods)
			list := h.nodeList()
			fit := make([]*schedapi.NodeInfo, 0, len(list))
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				task := h.tasks[names[i]]
				fit = fit[:0]
				for _, n := range list {
					if h.plugin.predicate(task, n) == nil {
						fit = append(fit, n)
					}
				}
				scores, _ := h.plugin.batchNodeOrder(task, fit)
				best := ""
				for _, n := range fit {
					if best == "" || scores[n.Name] > scores[best] {
						best = n.Name
					}
				}
				if ev := allocateOn(h, names[i], best); ev.Err != nil {
					b.Fatal(ev.Err)
				}
				if i++; i == len(names) {
					for _, name := range names {
						discard(h, name)
					}
					i = 0
				}
			}
		})
	}
}

// meteredShared is the cross-session state with metrics exported, as
// vc-scheduler runs it.
func meteredShared() *Shared {
	s := NewShared(func() time.Time { return testNow })
	s.ExportMetrics(prometheus.NewRegistry())
	return s
}

// BenchmarkMemoSweep is a backlog's steady state at 1000 nodes: tasks of 16
// request shapes, each tried on every node and scored on every node, with
// every answer already in the Fit memo (a session asks each shape on each
// node state many times). What is left is finding the answer: per node.
func BenchmarkMemoSweep(b *testing.B) {
	nodes, pods := benchCluster(b, 1000)
	const shapes = 16
	var names []string
	for i := range 4 * shapes {
		name := fmt.Sprintf("t%02d", i)
		names = append(names, name)
		pods = append(pods, gpuPod("ns", name, fmt.Sprintf("solo%d", i), 1, int64(1024*(1+i%shapes)), 5))
	}
	h := newHandSession(b, meteredShared(), DefaultArgs(), nodes, pods)
	list := h.nodeList()
	sweep := func(task *schedapi.TaskInfo) {
		for _, n := range list {
			if err := h.plugin.predicate(task, n); err != nil {
				b.Fatal(err)
			}
		}
		if scores, _ := h.plugin.batchNodeOrder(task, list); len(scores) != len(list) {
			b.Fatalf("%d scores for %d nodes", len(scores), len(list))
		}
	}
	for _, name := range names[:shapes] {
		sweep(h.tasks[name])
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		sweep(h.tasks[names[i%len(names)]])
		i++
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(len(list)), "ns/node")
}
