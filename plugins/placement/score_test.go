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

// Binpack scores that strand no memory sit in the upper half of the range, and
// so do best-linked multi-GPU sets: both map v to 50 + v/2.
func noStrand(v float64) float64  { return 50 + v/2 }
func bestLinks(v float64) float64 { return 50 + v/2 }

// large80 is how large an 80 GiB GPU rates for whole-GPU binpack: 81920/(81920+32768).
const large80 = 5.0 / 7

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
		{name: "binpack: utilisation after placement", // (40960+8192)/81920 = 0.6 mem, (50+10)% = 0.6 cores -> 60; 40% cores left for 40% memory: nothing stranded
			req: one, node: pt.Node("n1").GPUs(1, a100, mib).Use(0, 40960, 50).Obj(), policy: placement.Binpack, want: noStrand(60)},
		{name: "spread: emptiness after placement", // 1 - 0.6 -> 40
			req: one, node: pt.Node("n1").GPUs(1, a100, mib).Use(0, 40960, 50).Obj(), policy: placement.Spread, want: 40},
		{name: "binpack over two GPUs, unhealthy ignored", // (8192+40960)/(2*81920) = 0.3 mem, 60/200 = 0.3 cores -> 30
			req: one, node: pt.Node("n1").GPUs(3, a100, mib).Use(0, 40960, 50).Unhealthy(2).Obj(), policy: placement.Binpack, want: noStrand(30)},
		{name: "binpack with a sibling here", // total 2, colocate 1+1 = 2, tie = 0.75*0.6 + 0.25*1 (same GPU) = 0.7 -> 100*(1+0.7)/2 = 85
			req: one, node: pt.Node("n1").GPUs(1, a100, mib).Use(0, 40960, 50).Obj(), policy: placement.Binpack,
			gang: &placement.GangView{Placed: map[string]placement.Siblings{"n1": {Tasks: 1, GPUs: []string{"GPU-n1-0"}}}, PlacedTasks: 1}, want: noStrand(85)},
		{name: "binpack with the sibling elsewhere", // total 2, colocate 1 -> 100*(0+0.6)/2 = 30
			req: one, node: pt.Node("n1").GPUs(1, a100, mib).Use(0, 40960, 50).Obj(), policy: placement.Binpack,
			gang: &placement.GangView{Placed: map[string]placement.Siblings{"n9": {Tasks: 1}}, PlacedTasks: 1}, want: noStrand(30)},
		// Whole GPUs: tie = (util + large80) / 2.
		{name: "binpack: node hosts all 3 pending", // total 4, colocate 1+3 = 4, util 1 GPU of 4 = 0.25 -> 100*(3+tie)/4
			req: whole, node: pt.Node("n1").GPUs(4, a100, mib).Obj(), policy: placement.Binpack,
			gang: &placement.GangView{Pending: []placement.Pending{{Request: whole, Count: 3}}}, want: noStrand(100 * (3 + (0.25+large80)/2) / 4)},
		{name: "binpack: full node hosts only this one", // total 4, colocate 1, util 1 -> 100*(0+tie)/4
			req: whole, node: pt.Node("n1").GPUs(1, a100, mib).Obj(), policy: placement.Binpack,
			gang: &placement.GangView{Pending: []placement.Pending{{Request: whole, Count: 3}}}, want: noStrand(100 * (1 + large80) / 2 / 4)},
		{name: "binpack: pending shapes simulated", // 2-GPU + 1-GPU pending on 4 GPUs after 1: both fit; total 3, colocate 3, util 0.25 -> 100*(2+tie)/3
			req: whole, node: pt.Node("n1").GPUs(4, a100, mib).Obj(), policy: placement.Binpack,
			gang: &placement.GangView{Pending: []placement.Pending{{Request: pt.Req().GPUs(2, 0, 100).Obj(), Count: 1}, {Request: whole, Count: 1}}}, want: noStrand(100 * (2 + (0.25+large80)/2) / 3)},
		{name: "binpack: pending shapes partly fit", // 4 GPUs, this takes 1, 2-GPU fits, second 2-GPU does not; total 3, colocate 2 -> 100*(1+tie)/3
			req: whole, node: pt.Node("n1").GPUs(4, a100, mib).Obj(), policy: placement.Binpack,
			gang: &placement.GangView{Pending: []placement.Pending{{Request: pt.Req().GPUs(2, 0, 100).Obj(), Count: 2}}}, want: noStrand(100 * (1 + (0.25+large80)/2) / 3)},
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
	// util (81920+8192)/(8*81920) mem = 0.1375, 110/800 cores = 0.1375: 100*(1 + 0.75*0.1375 + 0.25*island)/2;
	// an idle GPU strands nothing for its first tenant (90% cores left for 90% memory)
	if want := noStrand(100 * (1 + 0.75*0.1375 + 0.25) / 2); !near(next, want) {
		t.Errorf("next to the sibling: %v, want %v", next, want)
	}
	if want := noStrand(100 * (1 + 0.75*0.1375) / 2); !near(farScore, want) {
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
	// pending would land on (2,3): NVLinked -> colocate 2 of 2, util 0.5, whole GPUs: tie (0.5+large80)/2
	if got, want := score(t, pair, full, gang, placement.Binpack), bestLinks(noStrand(100*(1+(0.5+large80)/2)/2)); !near(got, want) {
		t.Errorf("best-linked sibling fits: %v, want %v", got, want)
	}
	// 6 GPUs: pairs (0,1)(2,3), GPUs 4 and 5 unlinked; 2 and 3 busy. This task
	// takes (0,1); the pending one would get (4,5) over PCIe: not counted.
	// colocate 1 of 2, util (2 own + 2 busy)/6, tie (4/6+large80)/2
	weak := pt.Node("n1").GPUs(6, a100, mib).NVLink(0, 1, 4).NVLink(2, 3, 4).Use(2, mib, 100).Use(3, mib, 100).Obj()
	if got, want := score(t, pair, weak, gang, placement.Binpack), bestLinks(noStrand(100*(4.0/6+large80)/2/2)); !near(got, want) {
		t.Errorf("sibling only on PCIe: %v, want %v", got, want)
	}
}

// TestBinpackAvoidsStrandingMemory: under binpack a fraction goes where its
// memory stays usable before it goes to the fullest GPU or node; spread is
// unchanged.
func TestBinpackAvoidsStrandingMemory(t *testing.T) {
	const l4, l4MiB = "NVIDIA L4", 23034
	// 4 GiB with 50% of the cores. GPU0 (fuller) holds 40 GiB at 20%: adding it
	// leaves 30% of the cores for 44 GiB, ~17 GiB stranded. GPU1 holds 4 GiB at
	// 30%, already short of cores: it strands ~3 GiB more there.
	node := pt.Node("n1").GPUs(2, a100, mib).Use(0, 40960, 20).Use(1, 4096, 30).Obj()
	computeHeavy := pt.Req().GPUs(1, 4096, 50).Obj()
	p, reasons := placement.Fit(computeHeavy, node, nil)
	if len(reasons) > 0 {
		t.Fatal(reasons)
	}
	if got := positions(p); got[0][0] != 1 {
		t.Errorf("binpack put the compute-heavy fraction on GPU %v, want GPU 1 (strands less than the fuller GPU 0)", got)
	}
	spread := pt.Req().GPUs(1, 4096, 50).Policy(placement.Spread).Obj()
	if p, _ := placement.Fit(spread, node, nil); positions(p)[0][0] != 1 {
		t.Errorf("spread put it on GPU %v, want the emptier GPU 1", positions(p))
	}

	// 12 GiB with 30% of the cores: on the busier 80 GiB node it strands 40 GiB
	// (70% of the cores for 68 GiB); on an idle L4 it fills half the memory
	// and strands nothing.
	fraction := pt.Req().GPUs(1, 12288, 30).Obj()
	big := pt.Node("big").GPUs(2, a100, mib).Exclusive(0).Obj()
	small := pt.Node("small").GPUs(1, l4, l4MiB).Obj()
	bigScore := score(t, fraction, big, nil, placement.Binpack)
	smallScore := score(t, fraction, small, nil, placement.Binpack)
	if smallScore < 50 || bigScore >= 50 || bigScore >= smallScore {
		t.Errorf("binpack: idle L4 %v, half-full 80 GiB node %v: want the L4 in [50,100] and the 80 GiB node below 50", smallScore, bigScore)
	}
	// The more it strands, the lower: on an idle 45 GiB GPU it strands 5 GiB
	// (70% of the cores carry 28 of the 33 GiB free), above 40 GiB stranded.
	lessStranded := pt.Node("less").GPUs(1, "NVIDIA L40S", 46068).Obj()
	if s := score(t, fraction, lessStranded, nil, placement.Binpack); s <= bigScore || s >= 50 {
		t.Errorf("binpack: stranding less scores %v, stranding 40 GiB %v: want the first higher, both below 50", s, bigScore)
	}
	if sb, ss := score(t, fraction, big, nil, placement.Spread), score(t, fraction, small, nil, placement.Spread); !near(sb, 100*(1-(94208.0/163840+130.0/200)/2)) || !near(ss, 100*(1-(12288.0/23034+0.3)/2)) {
		t.Errorf("spread: 80 GiB node %v, L4 %v: want utilisation only", sb, ss)
	}
}

// TestBinpackWholeGPUsPreferLargeGPUs: whole GPUs lean to the largest GPUs,
// which fractions would strand most; utilisation still counts as much.
func TestBinpackWholeGPUsPreferLargeGPUs(t *testing.T) {
	whole := pt.Req().GPUs(1, 0, 100).Obj()
	large := pt.Node("large").GPUs(1, a100, mib).Obj()
	small := pt.Node("small").GPUs(1, "NVIDIA L4", 23034).Obj()
	if l, s := score(t, whole, large, nil, placement.Binpack), score(t, whole, small, nil, placement.Binpack); l <= s || !near(l, noStrand(100*(1+large80)/2)) {
		t.Errorf("whole GPU: 80 GiB %v, 24 GiB %v: want the 80 GiB GPU higher, at %v", l, s, noStrand(100*(1+large80)/2))
	}
	// A fuller node of small GPUs still beats an idle one of large GPUs when
	// utilisation differs more than size: 3 of 4 L4s busy vs 1 of 4 A100s.
	fullSmall := pt.Node("small").GPUs(4, "NVIDIA L4", 23034).Exclusive(0).Exclusive(1).Obj()
	idleLarge := pt.Node("large").GPUs(4, a100, mib).Obj()
	if fs, il := score(t, whole, fullSmall, nil, placement.Binpack), score(t, whole, idleLarge, nil, placement.Binpack); fs <= il {
		t.Errorf("whole GPU: 3/4 busy L4 node %v <= idle A100 node %v", fs, il)
	}
	// Fractions are not steered by size.
	frac := pt.Req().GPUs(1, 8192, 10).Obj()
	if l, s := score(t, frac, large, nil, placement.Binpack), score(t, frac, small, nil, placement.Binpack); l >= s {
		t.Errorf("fraction: idle 80 GiB %v >= idle L4 %v (the L4 is fuller after it)", l, s)
	}
	// Spread ignores size.
	if l, s := score(t, whole, large, nil, placement.Spread), score(t, whole, small, nil, placement.Spread); !near(l, s) {
		t.Errorf("spread whole GPU: 80 GiB %v, 24 GiB %v: want equal", l, s)
	}
}
