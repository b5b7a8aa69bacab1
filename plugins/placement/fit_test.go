package placement_test

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/volcano-vgpu/volcano-vgpu/plugins/placement"
	pt "github.com/volcano-vgpu/volcano-vgpu/plugins/placement/placementtest"
)

const (
	a100 = "NVIDIA A100-SXM4-80GB"
	t4   = "Tesla T4"
	mib  = 81920 // A100-80GB memory
)

// positions is the GPU positions per container, nil when the container asks none.
func positions(p placement.Placement) [][]int {
	var out [][]int
	for _, c := range p.Containers {
		var pos []int
		for _, d := range c.Devices {
			pos = append(pos, d.Pos)
		}
		out = append(out, pos)
	}
	return out
}

// nodeCodes is the codes of the node-level reasons.
func nodeCodes(rs []placement.Reason) []placement.Code {
	var out []placement.Code
	for _, r := range rs {
		if r.NodeLevel() {
			out = append(out, r.Code)
		}
	}
	return out
}

func eight() *pt.NodeBuilder { return pt.Node("n1").GPUs(8, a100, mib) }

func TestFit(t *testing.T) {
	tests := []struct {
		name      string
		node      *placement.Node
		req       *placement.Request
		want      [][]int
		wantCodes []placement.Code
	}{
		{name: "binpack prefers the fuller GPU", // GPU1 after: 51200/81920 = 62.5% mem, 50% cores -> 5625; GPU2: 37.5%, 50% -> 4375; idle: 12.5%, 25% -> 1875
			node: pt.Node("n1").GPUs(4, a100, mib).Use(1, 40960, 25).Use(2, 20480, 25).Obj(),
			req:  pt.Req().GPUs(1, 10240, 25).Obj(), want: [][]int{{1}}},
		{name: "spread picks an emptiest GPU", // GPUs 0 and 3 idle: 1875 each; lowest position wins
			node: pt.Node("n1").GPUs(4, a100, mib).Use(1, 40960, 25).Use(2, 20480, 25).Obj(),
			req:  pt.Req().GPUs(1, 10240, 25).Policy(placement.Spread).Obj(), want: [][]int{{0}}},
		{name: "spread prefers fewer tenants at equal utilisation", // GPU0: 2 tenants, GPU1: 1 tenant, same 20480 MiB and 20 cores
			node: pt.Node("n1").GPUs(2, a100, mib).Use(0, 10240, 10).Use(0, 10240, 10).Use(1, 20480, 20).Obj(),
			req:  pt.Req().GPUs(1, 1024, 10).Policy(placement.Spread).Obj(), want: [][]int{{1}}},
		{name: "exclusive never shares", // GPU0 has a tenant, 100 cores needs an idle GPU
			node: pt.Node("n1").GPUs(2, a100, mib).Use(0, 1024, 10).Obj(),
			req:  pt.Req().GPUs(1, 1024, 100).Obj(), want: [][]int{{1}}},
		{name: "exclusive refused on shared GPUs",
			node: pt.Node("n1").GPUs(2, a100, mib).Use(0, 1024, 10).Use(1, 1024, 10).Obj(),
			req:  pt.Req().GPUs(1, 1024, 100).Obj(), wantCodes: []placement.Code{placement.CodeShared}},
		{name: "exclusively held GPU takes nobody else", // 80 GiB free on GPU1 once more, but it is held
			node: pt.Node("n1").GPUs(2, a100, mib).Exclusive(0).Use(1, mib, 10).Obj(),
			req:  pt.Req().GPUs(1, 1024, 0).Obj(), wantCodes: []placement.Code{placement.CodeMemory, placement.CodeExclusiveHeld}},
		{name: "0-core task does not join a GPU with all cores booked", // GPU0: 50+50 = 100 cores
			node: pt.Node("n1").GPUs(2, a100, mib).Use(0, 1024, 50).Use(0, 1024, 50).Obj(),
			req:  pt.Req().GPUs(1, 1024, 0).Obj(), want: [][]int{{1}}},
		{name: "tenant limit", // MaxShares 2: GPU0 full with 2 tenants
			node: pt.Node("n1").GPUs(2, a100, mib).MaxShares(2).Use(0, 1024, 1).Use(0, 1024, 1).Obj(),
			req:  pt.Req().GPUs(1, 1024, 1).Obj(), want: [][]int{{1}}},
		{name: "cores add up", // GPU0: 70 used + 40 > 100
			node: pt.Node("n1").GPUs(2, a100, mib).Use(0, 1024, 70).Use(1, 1024, 10).Obj(),
			req:  pt.Req().GPUs(1, 1024, 40).Obj(), want: [][]int{{1}}},
		{name: "2 GPUs on NVLink pairs get a pair, the one with the fuller GPU", // GPU0 partly used: pair (0,1) beats the idle pairs on binpack
			node: eight().NVLinkPairs().Use(0, 8192, 10).Obj(),
			req:  pt.Req().GPUs(2, 10240, 25).Obj(), want: [][]int{{0, 1}}},
		{name: "2 GPUs on NVLink pairs skip a broken pair", // GPU0 held: {1,x} has no NVLink
			node: eight().NVLinkPairs().Exclusive(0).Obj(),
			req:  pt.Req().GPUs(2, 10240, 25).Obj(), want: [][]int{{2, 3}}},
		{name: "4 GPUs on NVLink pairs take two whole pairs under one host bridge", // total NVLinks 4+4 = 8; {0,1,2,3} host bridge beats {0,1,4,5} cross NUMA
			node: eight().NVLinkPairs().Obj(),
			req:  pt.Req().GPUs(4, 10240, 25).Obj(), want: [][]int{{0, 1, 2, 3}}},
		{name: "4 GPUs on NVSwitch", // every set has 6 pairs × 12 links and no PCIe peer traffic; one NUMA node: 0-3
			node: eight().NVSwitch().Obj(),
			req:  pt.Req().GPUs(4, 10240, 25).Obj(), want: [][]int{{0, 1, 2, 3}}},
		{name: "4 GPUs on NVSwitch with GPU 1 held", // links and binpack tie; {0,2,3,x} spans 2 NUMA nodes, {4,5,6,7} one
			node: eight().NVSwitch().Exclusive(1).Obj(),
			req:  pt.Req().GPUs(4, 10240, 25).Obj(), want: [][]int{{4, 5, 6, 7}}},
		{name: "2 GPUs on a PCIe-only node stay on one NUMA node over binpack", // GPU1 partly used pulls {1,x}, but {1,2} and {1,3} cross NUMA (SYS); {2,3} share NUMA node 1
			node: pt.Node("n1").GPUs(4, "L4", 23034).FlatPCIe(placement.PCIeSystem).PCIe(0, 1, placement.PCIeNode).PCIe(2, 3, placement.PCIeNode).
				Use(1, 8192, 20).Exclusive(0).Obj(),
			req: pt.Req().GPUs(2, 4096, 10).Obj(), want: [][]int{{2, 3}}},
		{name: "2 GPUs on NVSwitch stack onto a partly used GPU", // NVLinked pairs skip PCIe, so binpack decides: {1,x}
			node: eight().NVSwitch().Exclusive(0).Use(1, 8192, 10).Obj(),
			req:  pt.Req().GPUs(2, 10240, 25).Obj(), want: [][]int{{1, 2}}},
		{name: "2 GPUs on NVSwitch under spread avoid the used GPU",
			node: eight().NVSwitch().Exclusive(0).Use(1, 8192, 10).Obj(),
			req:  pt.Req().GPUs(2, 10240, 25).Policy(placement.Spread).Obj(), want: [][]int{{2, 3}}},
		{name: "8 GPUs on NVSwitch", node: eight().NVSwitch().Obj(),
			req: pt.Req().GPUs(8, 10240, 25).Obj(), want: [][]int{{0, 1, 2, 3, 4, 5, 6, 7}}},
		{name: "1 GPU keeps NVLink pairs whole", // idle islands left: GPU1 -> {2,3}{4,5}{6,7} = 4+4+4 = 12; GPU2 -> {1}{3}{4,5}{6,7} = 10
			node: eight().NVLinkPairs().Exclusive(0).Obj(),
			req:  pt.Req().GPUs(1, 10240, 25).Obj(), want: [][]int{{1}}},
		{name: "1 GPU spread keeps NVLink pairs whole too", // GPUs 1-7 idle, equal spread score
			node: eight().NVLinkPairs().Exclusive(0).Obj(),
			req:  pt.Req().GPUs(1, 10240, 25).Policy(placement.Spread).Obj(), want: [][]int{{1}}},
		{name: "1 GPU binpack stacks on a partly used GPU before keeping pairs whole",
			node: eight().NVLinkPairs().Use(0, 8192, 10).Obj(),
			req:  pt.Req().GPUs(1, 10240, 25).Obj(), want: [][]int{{0}}},
		{name: "topology none ignores links", // binpack: GPUs 0 and 2 are the fullest
			node: eight().NVLinkPairs().Use(0, 8192, 10).Use(2, 8192, 10).Obj(),
			req:  pt.Req().GPUs(2, 10240, 25).Topology(placement.TopologyNone).Obj(), want: [][]int{{0, 2}}},
		{name: "required topology fails on a PCIe-only node", node: eight().Obj(),
			req:       pt.Req().GPUs(2, 10240, 25).Topology(placement.TopologyRequired).Obj(),
			wantCodes: []placement.Code{placement.CodeTopology}},
		{name: "required topology takes a whole pair", node: eight().NVLinkPairs().Exclusive(0).Obj(),
			req: pt.Req().GPUs(2, 10240, 25).Topology(placement.TopologyRequired).Obj(), want: [][]int{{2, 3}}},
		{name: "required topology fails when every pair is broken", node: eight().NVLinkPairs().Exclusive(0).Exclusive(2).Exclusive(4).Exclusive(6).Obj(),
			req:       pt.Req().GPUs(2, 10240, 25).Topology(placement.TopologyRequired).Obj(),
			wantCodes: []placement.Code{placement.CodeTopology}},
		{name: "prefer places on broken pairs anyway", // no NVLink left: {1,3} share a host bridge
			node: eight().NVLinkPairs().Exclusive(0).Exclusive(2).Exclusive(4).Exclusive(6).Obj(),
			req:  pt.Req().GPUs(2, 10240, 25).Obj(), want: [][]int{{1, 3}}},
		{name: "required topology refuses a weaker set than the node could offer", // best pair has 12 links; only {1,3} with 2 is free
			node:      weakStrong().Exclusive(0).Exclusive(2).Obj(),
			req:       pt.Req().GPUs(2, 1024, 10).Topology(placement.TopologyRequired).Obj(),
			wantCodes: []placement.Code{placement.CodeTopology}},
		{name: "required topology on 4 GPUs of pairs: two pairs are not one island", node: eight().NVLinkPairs().Obj(),
			req:       pt.Req().GPUs(4, 10240, 25).Topology(placement.TopologyRequired).Obj(),
			wantCodes: []placement.Code{placement.CodeTopology}},
		{name: "type include", node: mixed(), req: pt.Req().GPUs(1, 1024, 10).TypeInclude("a100").Obj(), want: [][]int{{1}}},
		{name: "type exclude", node: mixed(), req: pt.Req().GPUs(1, 1024, 10).TypeExclude("A100").Obj(), want: [][]int{{0}}},
		{name: "type include matches nothing", node: mixed(), req: pt.Req().GPUs(1, 1024, 10).TypeInclude("H100").Obj(),
			wantCodes: []placement.Code{placement.CodeTooFewMatching}},
		{name: "uuid include", node: eight().Obj(), req: pt.Req().GPUs(1, 1024, 10).UUIDInclude("GPU-n1-5").Obj(), want: [][]int{{5}}},
		{name: "uuid exclude", node: pt.Node("n1").GPUs(2, a100, mib).Obj(),
			req: pt.Req().GPUs(1, 1024, 10).UUIDExclude("GPU-n1-0").Obj(), want: [][]int{{1}}},
		{name: "memory percentage", // 50% of 81920 = 40960 > 40000 free on GPU0
			node: pt.Node("n1").GPUs(2, a100, mib).Use(0, 41920, 10).Obj(),
			req:  pt.Req().Percent(1, 50, 10).Obj(), want: [][]int{{1}}},
		{name: "missing memory takes the whole GPU", // GPU0 has 1 MiB used
			node: pt.Node("n1").GPUs(2, a100, mib).Use(0, 1, 1).Obj(),
			req:  pt.Req().GPUs(1, 0, 30).Obj(), want: [][]int{{1}}},
		{name: "stale node", node: eight().Stale().Obj(), req: pt.Req().GPUs(1, 1024, 10).Obj(),
			wantCodes: []placement.Code{placement.CodeStale}},
		{name: "unhealthy GPU skipped", node: pt.Node("n1").GPUs(2, a100, mib).Use(0, 8192, 10).Unhealthy(0).Obj(),
			req: pt.Req().GPUs(1, 1024, 10).Obj(), want: [][]int{{1}}},
		{name: "too few healthy GPUs", node: pt.Node("n1").GPUs(4, a100, mib).Unhealthy(0, 1).Obj(),
			req: pt.Req().GPUs(4, 1024, 10).Obj(), wantCodes: []placement.Code{placement.CodeTooFewHealthy}},
		{name: "node without GPUs", node: pt.Node("n1").Obj(), req: pt.Req().GPUs(1, 1024, 10).Obj(),
			wantCodes: []placement.Code{placement.CodeNoGPUs}},
		{name: "app containers add up", // 50000 + 50000 > 81920: the second container goes to GPU1
			node: pt.Node("n1").GPUs(2, a100, mib).Obj(),
			req:  pt.Req().GPUs(1, 50000, 10).GPUs(1, 50000, 10).Obj(), want: [][]int{{0}, {1}}},
		{name: "app containers stack under binpack", // 30000 + 30000 <= 81920
			node: pt.Node("n1").GPUs(2, a100, mib).Obj(),
			req:  pt.Req().GPUs(1, 30000, 10).GPUs(1, 30000, 10).Obj(), want: [][]int{{0}, {0}}},
		{name: "app containers that cannot all fit", // 3 × 50000 on 2 GPUs
			node: pt.Node("n1").GPUs(2, a100, mib).Obj(),
			req:  pt.Req().GPUs(1, 50000, 10).GPUs(1, 50000, 10).GPUs(1, 50000, 10).Obj(), wantCodes: []placement.Code{placement.CodeMemory}},
		{name: "init container reuses the app GPU: max, not sum", // max(81920, 40960) fits one GPU; the sum would not
			node: pt.Node("n1").GPUs(1, a100, mib).Obj(),
			req:  pt.Req().Init(1, mib, 100).GPUs(1, 40960, 50).Obj(), want: [][]int{{0}, {0}}},
		{name: "init container goes elsewhere when the app GPU is shared with another pod",
			node: pt.Node("n1").GPUs(2, a100, mib).Use(0, 8192, 10).Obj(),
			req:  pt.Req().GPUs(1, 8192, 10).Init(1, mib, 100).Obj(), want: [][]int{{0}, {1}}},
		{name: "sidecar adds to the app containers: sum, not max", // 50000 + 50000 > 81920: the sidecar cannot share the app's GPU
			node: pt.Node("n1").GPUs(2, a100, mib).Obj(),
			req:  pt.Req().Sidecar(1, 50000, 10).GPUs(1, 50000, 10).Obj(), want: [][]int{{0}, {1}}},
		{name: "sidecar and app that cannot both fit on the only GPU", // a classic init of the same size would fit
			node: pt.Node("n1").GPUs(1, a100, mib).Obj(),
			req:  pt.Req().Sidecar(1, 50000, 10).GPUs(1, 50000, 10).Obj(), wantCodes: []placement.Code{placement.CodeMemory}},
		{name: "sidecar is not steered onto the app's GPUs", // spread: the sidecar takes its own idle GPU
			node: pt.Node("n1").GPUs(2, a100, mib).Obj(),
			req:  pt.Req().Sidecar(1, 8192, 10).GPUs(1, 8192, 10).Policy(placement.Spread).Obj(), want: [][]int{{0}, {1}}},
		{name: "init after a sidecar fits beside it", // GPU0: sidecar 50000 + init 40000 > 81920, so the init goes to GPU1
			node: pt.Node("n1").GPUs(2, a100, mib).Obj(),
			req:  pt.Req().Sidecar(1, 50000, 10).Init(1, 40000, 10).GPUs(1, 1000, 10).Obj(), want: [][]int{{0}, {1}, {0}}},
		{name: "init before a sidecar does not run beside it", // the init runs first and alone: GPU0 max(40000, 50000+1000)
			node: pt.Node("n1").GPUs(1, a100, mib).Obj(),
			req:  pt.Req().Init(1, 40000, 10).Sidecar(1, 50000, 10).GPUs(1, 1000, 10).Obj(), want: [][]int{{0}, {0}, {0}}},
		{name: "container without GPUs", node: eight().Obj(),
			req: pt.Req().GPUs(0, 0, 0).GPUs(1, 1024, 10).Obj(), want: [][]int{nil, {0}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			before := tt.node.Clone()
			p, reasons := placement.Fit(tt.req, tt.node, nil)
			if diff := cmp.Diff(before, tt.node, cmp.AllowUnexported(placement.Links{})); diff != "" {
				t.Errorf("Fit changed the node (-before +after):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantCodes, nodeCodes(reasons)); diff != "" {
				t.Errorf("node-level reason codes (-want +got):\n%s\nreasons: %v", diff, reasons)
			}
			if len(reasons) > 0 {
				return
			}
			if diff := cmp.Diff(tt.want, positions(p)); diff != "" {
				t.Errorf("GPU positions (-want +got):\n%s", diff)
			}
		})
	}
}

// weakStrong is 4 GPUs: pairs (0,1) and (2,3) with 12 NVLinks, all other pairs 2.
func weakStrong() *pt.NodeBuilder {
	b := pt.Node("n1").GPUs(4, a100, mib)
	for i := 0; i < 4; i++ {
		for j := i + 1; j < 4; j++ {
			b.NVLink(i, j, 2)
		}
	}
	return b.NVLink(0, 1, 12).NVLink(2, 3, 12)
}

func mixed() *placement.Node {
	return pt.Node("n1").GPU("GPU-t4", t4, 15360).GPU("GPU-a100", a100, mib).Obj()
}

func TestFitDevices(t *testing.T) {
	tests := []struct {
		name     string
		node     *placement.Node
		req      *placement.Request
		defaults placement.Defaults
		want     []placement.ContainerPlacement
	}{
		{name: "memory percentage in MiB", // 25% of 81920 = 20480
			node: pt.Node("n1").GPUs(1, a100, mib).Obj(), req: pt.Req().Percent(1, 25, 30).Obj(),
			want: []placement.ContainerPlacement{{Name: "c0", Devices: []placement.Device{{Pos: 0, UUID: "GPU-n1-0", MemoryMiB: 20480, Cores: 30}}}}},
		{name: "no memory and no cores: whole memory, default cores",
			node: pt.Node("n1").GPUs(1, a100, mib).Obj(), req: pt.Req().GPUs(1, 0, 0).Obj(), defaults: placement.Defaults{Cores: 10},
			want: []placement.ContainerPlacement{{Name: "c0", Devices: []placement.Device{{Pos: 0, UUID: "GPU-n1-0", MemoryMiB: mib, Cores: 10}}}}},
		{name: "memory without cores keeps 0 cores",
			node: pt.Node("n1").GPUs(1, a100, mib).Obj(), req: pt.Req().GPUs(1, 4096, 0).Obj(), defaults: placement.Defaults{Cores: 10},
			want: []placement.ContainerPlacement{{Name: "c0", Devices: []placement.Device{{Pos: 0, UUID: "GPU-n1-0", MemoryMiB: 4096}}}}},
		{name: "percentage wins over MiB",
			node: pt.Node("n1").GPUs(1, a100, mib).Obj(),
			req:  pt.Req().Container(placement.Container{Number: 1, MemoryMiB: 1024, MemoryPercent: 10, Cores: 5}).Obj(),
			want: []placement.ContainerPlacement{{Name: "c0", Devices: []placement.Device{{Pos: 0, UUID: "GPU-n1-0", MemoryMiB: 8192, Cores: 5}}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.req.Normalize(tt.defaults); err != nil {
				t.Fatal(err)
			}
			p, reasons := placement.Fit(tt.req, tt.node, nil)
			if len(reasons) > 0 {
				t.Fatalf("Fit failed: %v", reasons)
			}
			if diff := cmp.Diff(tt.want, p.Containers); diff != "" {
				t.Errorf("containers (-want +got):\n%s", diff)
			}
		})
	}
}

func TestNormalize(t *testing.T) {
	tests := []struct {
		name    string
		req     placement.Request
		want    placement.Request
		wantErr error
	}{
		{name: "defaults fill policy, topology and cores; filters trimmed",
			req: placement.Request{Containers: []placement.Container{{Number: 1}}, TypeInclude: []string{" A100 ", ""}},
			want: placement.Request{Containers: []placement.Container{{Number: 1, Cores: 20}}, TypeInclude: []string{"A100"},
				DevicePolicy: placement.Spread, Topology: placement.TopologyPrefer}},
		{name: "cores above 100", req: placement.Request{Containers: []placement.Container{{Number: 1, Cores: 101}}}, wantErr: placement.ErrInvalidRequest},
		{name: "negative number", req: placement.Request{Containers: []placement.Container{{Number: -1}}}, wantErr: placement.ErrInvalidRequest},
		{name: "percentage above 100", req: placement.Request{Containers: []placement.Container{{Number: 1, MemoryPercent: 150}}}, wantErr: placement.ErrInvalidRequest},
		{name: "unknown policy", req: placement.Request{DevicePolicy: "first-fit"}, wantErr: placement.ErrUnknownPolicy},
		{name: "unknown topology", req: placement.Request{Topology: "strict"}, wantErr: placement.ErrUnknownTopology},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.req.Normalize(placement.Defaults{Cores: 20, DevicePolicy: placement.Spread, Topology: placement.TopologyPrefer})
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("Normalize error = %v, want %v", err, tt.wantErr)
			}
			if tt.wantErr == nil {
				if diff := cmp.Diff(tt.want, tt.req); diff != "" {
					t.Errorf("request (-want +got):\n%s", diff)
				}
			}
		})
	}
}

func TestFitInvalidRequest(t *testing.T) {
	req := pt.Req().GPUs(1, 1024, 150).Obj()
	_, reasons := placement.Fit(req, eight().Obj(), nil)
	if diff := cmp.Diff([]placement.Code{placement.CodeInvalidRequest}, nodeCodes(reasons)); diff != "" {
		t.Errorf("codes (-want +got):\n%s", diff)
	}
}
