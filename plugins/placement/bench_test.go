package placement_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/volcano-vgpu/volcano-vgpu/plugins/placement"
	pt "github.com/volcano-vgpu/volcano-vgpu/plugins/placement/placementtest"
)

// busyNode is an 8×A100 node already running pods 1-GPU pods, spread by Fit
// over its GPUs (so that every GPU is partly used and an 8-GPU ask still fits).
func busyNode(r *rand.Rand, name string, pods int, topo func(*pt.NodeBuilder) *pt.NodeBuilder) *placement.Node {
	node := topo(pt.Node(name).GPUs(8, a100, mib)).Obj()
	var f placement.Fitter
	for range pods {
		req := pt.Req().GPUs(1, int64(4096+r.IntN(4)*4096), 10+r.IntN(3)*5).Policy(placement.Spread).Obj()
		if p, reasons := f.Fit(req, node, nil); len(reasons) == 0 {
			if err := placement.Apply(node, p); err != nil {
				panic(err)
			}
		}
	}
	return node
}

func nvswitch(b *pt.NodeBuilder) *pt.NodeBuilder { return b.NVSwitch() }
func pairs(b *pt.NodeBuilder) *pt.NodeBuilder    { return b.NVLinkPairs() }

func BenchmarkFit(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 1))
	for _, topo := range []struct {
		name string
		fn   func(*pt.NodeBuilder) *pt.NodeBuilder
	}{{"nvswitch", nvswitch}, {"pairs", pairs}} {
		for _, n := range []int{1, 2, 4, 8} {
			b.Run(fmt.Sprintf("%s/%dGPU", topo.name, n), func(b *testing.B) {
				node := busyNode(r, "n", 10, topo.fn)
				req := pt.Req().GPUs(n, 4096, 10).Obj()
				var f placement.Fitter
				b.ReportAllocs()
				for b.Loop() {
					if _, reasons := f.Fit(req, node, nil); len(reasons) > 0 {
						b.Fatal(reasons)
					}
				}
			})
		}
	}
}

// BenchmarkPredicateScore is the per (task, node) cost of the plugin: Fit then ScoreNode.
func BenchmarkPredicateScore(b *testing.B) {
	r := rand.New(rand.NewPCG(2, 2))
	node := busyNode(r, "n", 10, nvswitch)
	gang := &placement.GangView{Placed: map[string]placement.Siblings{"n": {Tasks: 1, GPUs: []string{"GPU-n-3"}}}, PlacedTasks: 1}
	for _, tc := range []struct {
		name string
		req  *placement.Request
		gang *placement.GangView
	}{
		{"1GPU", pt.Req().GPUs(1, 8192, 20).Obj(), nil},
		{"4GPU", pt.Req().GPUs(4, 8192, 20).Obj(), nil},
		{"1GPU-gang-sibling", pt.Req().GPUs(1, 8192, 20).Obj(), gang},
		{"1GPU-gang-3-pending", pt.Req().GPUs(1, 8192, 20).Obj(), &placement.GangView{Pending: []placement.Pending{{Request: pt.Req().GPUs(1, 8192, 20).Obj(), Count: 3}}}},
		{"2GPU-gang-3-pending-simulated", pt.Req().GPUs(2, 8192, 20).Obj(), &placement.GangView{Pending: []placement.Pending{{Request: pt.Req().GPUs(2, 8192, 20).Obj(), Count: 3}}}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			var f placement.Fitter
			b.ReportAllocs()
			for b.Loop() {
				p, reasons := f.Fit(tc.req, node, tc.gang)
				if len(reasons) > 0 {
					b.Fatal(reasons)
				}
				f.ScoreNode(tc.req, node, p, tc.gang, placement.Binpack)
			}
		})
	}
}

// BenchmarkScan fits and scores one task on every node of a cluster of 8-GPU
// nodes running 10 pods each, as one scheduling cycle of a task does.
func BenchmarkScan(b *testing.B) {
	for _, size := range []int{1000, 5000} {
		r := rand.New(rand.NewPCG(3, uint64(size)))
		nodes := make([]*placement.Node, size)
		for i := range nodes {
			topo := nvswitch
			if i%2 == 1 {
				topo = pairs
			}
			nodes[i] = busyNode(r, fmt.Sprintf("n%d", i), 10, topo)
		}
		for _, tc := range []struct {
			name string
			req  *placement.Request
		}{{"1GPU", pt.Req().GPUs(1, 20000, 25).Obj()}, {"4GPU", pt.Req().GPUs(4, 20000, 25).Obj()}} {
			b.Run(fmt.Sprintf("%dnodes/%s", size, tc.name), func(b *testing.B) {
				var f placement.Fitter
				var closest placement.Closest
				b.ReportAllocs()
				for b.Loop() {
					best, bestScore := -1, -1.0
					for i, n := range nodes {
						p, reasons := f.Fit(tc.req, n, nil)
						if len(reasons) > 0 {
							if best < 0 && i == len(nodes)-1 {
								closest.Add(n.Name, reasons)
							}
							continue
						}
						if s := f.ScoreNode(tc.req, n, p, nil, placement.Binpack); s > bestScore {
							best, bestScore = i, s
						}
					}
					if best < 0 {
						b.Fatal("nothing fits")
					}
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(size), "ns/node")
			})
		}
	}
}
