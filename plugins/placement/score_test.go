package placement_test

import (
	"math"
	"testing"

	"github.com/volcano-vgpu/volcano-vgpu/plugins/placement"
	pt "github.com/volcano-vgpu/volcano-vgpu/plugins/placement/placementtest"
)

// score fits req on node and scores it.
func score(t *testing.T, req *placement.Request, node *placement.Node, gang *placement.GangView, policy placement.Policy) float64 {
	t.Helper()
	p, reasons := placement.Fit(req, node, gang)
	if len(reasons) > 0 {
		t.Fatalf("Fit on %s: %v", node.Name, reasons)
	}
	return placement.ScoreNode(req, node, p, gang, policy)
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

func TestScoreNode(t *testing.T) {
	one := pt.Req().GPUs(1, 8192, 10).Obj()
	whole := pt.Req().GPUs(1, 0, 100).Obj()
	tests := []struct {
		name   string
		req    *placement.Request
		node   *placement.Node
		gang   *placement.GangView
		policy placement.Policy
		want   float64
	}{
		{name: "binpack: utilisation after placement", // (40960+8192)/81920 = 0.6 mem, (50+10)% = 0.6 cores -> 60
			req: one, node: pt.Node("n1").GPUs(1, a100, mib).Use(0, 40960, 50).Obj(), policy: placement.Binpack, want: 60},
		{name: "spread: emptiness after placement", // 1 - 0.6 -> 40
			req: one, node: pt.Node("n1").GPUs(1, a100, mib).Use(0, 40960, 50).Obj(), policy: placement.Spread, want: 40},
		{name: "binpack over two GPUs, unhealthy ignored", // (8192+40960)/(2*81920) = 0.3 mem, 60/200 = 0.3 cores -> 30
			req: one, node: pt.Node("n1").GPUs(3, a100, mib).Use(0, 40960, 50).Unhealthy(2).Obj(), policy: placement.Binpack, want: 30},
		{name: "binpack with a sibling here", // total 2, colocate 1+1 = 2, tie = 0.75*0.6 + 0.25*1 (same GPU) = 0.7 -> 100*(1+0.7)/2 = 85
			req: one, node: pt.Node("n1").GPUs(1, a100, mib).Use(0, 40960, 50).Obj(), policy: placement.Binpack,
			gang: &placement.GangView{Placed: map[string]placement.Siblings{"n1": {Tasks: 1, GPUs: []string{"GPU-n1-0"}}}, PlacedTasks: 1}, want: 85},
		{name: "binpack with the sibling elsewhere", // total 2, colocate 1 -> 100*(0+0.6)/2 = 30
			req: one, node: pt.Node("n1").GPUs(1, a100, mib).Use(0, 40960, 50).Obj(), policy: placement.Binpack,
			gang: &placement.GangView{Placed: map[string]placement.Siblings{"n9": {Tasks: 1}}, PlacedTasks: 1}, want: 30},
		{name: "binpack: node hosts all 3 pending", // total 4, colocate 1+3 = 4, util 1 GPU of 4 = 0.25 -> 100*(3+0.25)/4 = 81.25
			req: whole, node: pt.Node("n1").GPUs(4, a100, mib).Obj(), policy: placement.Binpack,
			gang: &placement.GangView{Pending: []placement.Pending{{Request: whole, Count: 3}}}, want: 81.25},
		{name: "binpack: full node hosts only this one", // total 4, colocate 1, util 1 -> 100*(0+1)/4 = 25
			req: whole, node: pt.Node("n1").GPUs(1, a100, mib).Obj(), policy: placement.Binpack,
			gang: &placement.GangView{Pending: []placement.Pending{{Request: whole, Count: 3}}}, want: 25},
		{name: "binpack: pending shapes simulated", // 2-GPU + 1-GPU pending on 4 GPUs after 1: both fit; total 3, colocate 3, util 0.25 -> 100*(2+0.25)/3 = 75
			req: whole, node: pt.Node("n1").GPUs(4, a100, mib).Obj(), policy: placement.Binpack,
			gang: &placement.GangView{Pending: []placement.Pending{{Request: pt.Req().GPUs(2, 0, 100).Obj(), Count: 1}, {Request: whole, Count: 1}}}, want: 75},
		{name: "binpack: pending shapes partly fit", // 4 GPUs, this takes 1, 2-GPU fits, second 2-GPU does not; total 3, colocate 2 -> 100*(1+0.25)/3
			req: whole, node: pt.Node("n1").GPUs(4, a100, mib).Obj(), policy: placement.Binpack,
			gang: &placement.GangView{Pending: []placement.Pending{{Request: pt.Req().GPUs(2, 0, 100).Obj(), Count: 2}}}, want: 100 * 1.25 / 3},
		{name: "spread: no sibling here", // placed 2, siblings here 0, util 0.6 -> 100*(2+0.4)/3 = 80
			req: one, node: pt.Node("n1").GPUs(1, a100, mib).Use(0, 40960, 50).Obj(), policy: placement.Spread,
			gang: &placement.GangView{Placed: map[string]placement.Siblings{"n9": {Tasks: 2}}, PlacedTasks: 2}, want: 80},
		{name: "spread: one sibling here", // 100*(1+0.4)/3
			req: one, node: pt.Node("n1").GPUs(1, a100, mib).Use(0, 40960, 50).Obj(), policy: placement.Spread,
			gang: &placement.GangView{Placed: map[string]placement.Siblings{"n1": {Tasks: 1}, "n9": {Tasks: 1}}, PlacedTasks: 2}, want: 100 * 1.4 / 3},
		{name: "unknown policy scores 0", req: one, node: pt.Node("n1").GPUs(1, a100, mib).Obj(), policy: "first-fit", want: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := score(t, tt.req, tt.node, tt.gang, tt.policy); !near(got, tt.want) {
				t.Errorf("ScoreNode = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestScoreNodeIsland(t *testing.T) {
	// A sibling on GPU0 of an NVLink-pairs node. binpack places this task next to
	// it on GPU1 (NVLinked): island 1. Forced onto GPU2 by a UUID filter: island 0.
	node := eight().NVLinkPairs().Use(0, 81920, 100).Obj()
	gang := &placement.GangView{Placed: map[string]placement.Siblings{"n1": {Tasks: 1, GPUs: []string{"GPU-n1-0"}}}, PlacedTasks: 1}
	req := pt.Req().GPUs(1, 8192, 10).Obj()
	p, _ := placement.Fit(req, node, gang)
	if got := positions(p); got[0][0] != 1 {
		t.Fatalf("sibling-aware binpack placed on GPU %v, want GPU 1 (NVLinked to the sibling)", got)
	}
	next := placement.ScoreNode(req, node, p, gang, placement.Binpack)
	far := pt.Req().GPUs(1, 8192, 10).UUIDInclude("GPU-n1-2").Obj()
	farScore := score(t, far, node, gang, placement.Binpack)
	// util (81920+8192)/(8*81920) mem = 0.1375, 110/800 cores = 0.1375: 100*(1 + 0.75*0.1375 + 0.25*island)/2
	if want := 100 * (1 + 0.75*0.1375 + 0.25) / 2; !near(next, want) {
		t.Errorf("next to the sibling: %v, want %v", next, want)
	}
	if want := 100 * (1 + 0.75*0.1375) / 2; !near(farScore, want) {
		t.Errorf("away from the sibling: %v, want %v", farScore, want)
	}
}

func TestGangDeviceChoice(t *testing.T) {
	tests := []struct {
		name string
		req  *placement.Request
		node *placement.Node
		sibs []string
		want [][]int
	}{
		{name: "binpack joins the sibling's GPU", // GPU5 is fuller, but the sibling is on GPU2
			req: pt.Req().GPUs(1, 1024, 10).Obj(), node: eight().NVLinkPairs().Use(2, 1024, 10).Use(5, 20480, 10).Obj(),
			sibs: []string{"GPU-n1-2"}, want: [][]int{{2}}},
		{name: "binpack on NVSwitch: 2 GPUs beside the sibling's", // every pair 12 links; siblings on 0,1 -> self bonus 13 each for 0,1
			req: pt.Req().GPUs(2, 1024, 10).Obj(), node: eight().NVSwitch().Use(0, 1024, 10).Use(1, 1024, 10).Use(6, 8192, 10).Use(7, 8192, 10).Obj(),
			sibs: []string{"GPU-n1-0", "GPU-n1-1"}, want: [][]int{{0, 1}}},
		{name: "spread avoids the sibling's GPU", // GPU0 holds the sibling: spread goes to an idle GPU
			req: pt.Req().GPUs(1, 1024, 10).Policy(placement.Spread).Obj(), node: pt.Node("n1").GPUs(2, a100, mib).Use(0, 1024, 10).Use(1, 1024, 10).Obj(),
			sibs: []string{"GPU-n1-0"}, want: [][]int{{1}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			gang := &placement.GangView{Placed: map[string]placement.Siblings{"n1": {Tasks: 1, GPUs: tt.sibs}}, PlacedTasks: 1}
			p, reasons := placement.Fit(tt.req, tt.node, gang)
			if len(reasons) > 0 {
				t.Fatal(reasons)
			}
			if got := positions(p); !equalPositions(got, tt.want) {
				t.Errorf("positions = %v, want %v", got, tt.want)
			}
		})
	}
}

func equalPositions(a, b [][]int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if len(a[i]) != len(b[i]) {
			return false
		}
		for j := range a[i] {
			if a[i][j] != b[i][j] {
				return false
			}
		}
	}
	return true
}

// TestScoreNodeLinkQuality: a multi-GPU task never follows its siblings (or a
// fuller node) onto a set with weaker links than the topology offers while a
// best-linked set is free elsewhere; the e2e TestGangGetsNVLinkPairs shape.
func TestScoreNodeLinkQuality(t *testing.T) {
	pair := pt.Req().GPUs(2, 4096, 25).Obj()
	// NVLink pairs (0,1)(2,3)(4,5)(6,7) with one GPU of every pair full: two
	// GPUs fit only across pairs.
	broken := func(name string) *pt.NodeBuilder {
		return pt.Node(name).GPUs(8, a100, mib).NVLinkPairs().Use(0, mib, 100).Use(2, mib, 100).Use(4, mib, 100).Use(6, mib, 100)
	}
	tests := []struct {
		name       string
		req        *placement.Request
		good, weak *placement.Node
		gang       *placement.GangView
	}{
		{name: "fuller node with only PCIe pairs left loses to an emptier NVLinked one",
			req: pair, good: pt.Node("good").GPUs(8, a100, mib).NVLinkPairs().Obj(), weak: broken("weak").Obj()},
		{name: "siblings on the weak node do not pull the task onto PCIe", // colocation 3 of 4 there vs 1 of 4
			req: pair, good: pt.Node("good").GPUs(8, a100, mib).NVLinkPairs().Obj(), weak: broken("weak").Obj(),
			gang: &placement.GangView{
				Placed:      map[string]placement.Siblings{"weak": {Tasks: 2, GPUs: []string{"GPU-weak-1", "GPU-weak-3", "GPU-weak-1", "GPU-weak-3"}}},
				PlacedTasks: 2, Pending: []placement.Pending{{Request: pair, Count: 1}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			good := score(t, tt.req, tt.good, tt.gang, placement.Binpack)
			weak := score(t, tt.req, tt.weak, tt.gang, placement.Binpack)
			if weak >= good {
				t.Errorf("weak-linked node scores %v >= best-linked node %v", weak, good)
			}
			if good < 50 || weak >= 50 {
				t.Errorf("scores good %v, weak %v: want best-linked in [50,100], weaker below 50", good, weak)
			}
		})
	}
}

// TestPendingFitsCountsOnlyBestLinked: gang lookahead does not count a pending
// 2-GPU sibling as kept together when it would only get a PCIe pair.
func TestPendingFitsCountsOnlyBestLinked(t *testing.T) {
	pair := pt.Req().GPUs(2, 0, 100).Obj()
	// 4 GPUs, pairs (0,1)(2,3); GPU 2 busy. This task takes (0,1); the pending
	// one could only get GPUs 3 and nothing else: it does not fit at all. With
	// GPU 2 free instead of busy it gets (2,3).
	gang := &placement.GangView{Pending: []placement.Pending{{Request: pair, Count: 1}}}
	full := pt.Node("n1").GPUs(4, a100, mib).NVLink(0, 1, 4).NVLink(2, 3, 4).Obj()
	// pending would land on (2,3): NVLinked -> colocate 2 of 2, util 0.5 -> 50 + (100*(1+0.5)/2)/2 = 87.5
	if got, want := score(t, pair, full, gang, placement.Binpack), 50+100*(1+0.5)/2/2; !near(got, want) {
		t.Errorf("best-linked sibling fits: %v, want %v", got, want)
	}
	// 6 GPUs: pairs (0,1)(2,3), GPUs 4 and 5 unlinked; 2 and 3 busy. This task
	// takes (0,1); the pending one would get (4,5) over PCIe: not counted.
	// colocate 1 of 2, util (2 own + 2 busy)/6 -> 50 + (100*(0+4/6)/2)/2
	weak := pt.Node("n1").GPUs(6, a100, mib).NVLink(0, 1, 4).NVLink(2, 3, 4).Use(2, mib, 100).Use(3, mib, 100).Obj()
	if got, want := score(t, pair, weak, gang, placement.Binpack), 50+100*(4.0/6)/2/2; !near(got, want) {
		t.Errorf("sibling only on PCIe: %v, want %v", got, want)
	}
}
