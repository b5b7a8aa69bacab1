package placement_test

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/volcano-vgpu/volcano-vgpu/plugins/placement"
	pt "github.com/volcano-vgpu/volcano-vgpu/plugins/placement/placementtest"
)

var allowLinks = cmp.AllowUnexported(placement.Links{})

// usageOf is (used MiB, used cores, tenants, exclusive) per GPU.
func usageOf(n *placement.Node) [][4]int64 {
	var out [][4]int64
	for _, g := range n.GPUs {
		out = append(out, [4]int64{g.UsedMemoryMiB, int64(g.UsedCores), int64(g.Shares), int64(g.Exclusive)})
	}
	return out
}

func TestApplyFootprint(t *testing.T) {
	tests := []struct {
		name string
		node *placement.Node
		req  *placement.Request
		want [][4]int64
	}{
		{name: "one container on two GPUs",
			node: pt.Node("n1").GPUs(2, a100, mib).Use(0, 1000, 10).Obj(), req: pt.Req().GPUs(2, 4096, 20).Obj(),
			want: [][4]int64{{1000 + 4096, 10 + 20, 2, 0}, {4096, 20, 1, 0}}},
		{name: "app containers add up on one GPU", // 2 tenants, 3000+5000 MiB, 10+30 cores
			node: pt.Node("n1").GPUs(1, a100, mib).Obj(), req: pt.Req().GPUs(1, 3000, 10).GPUs(1, 5000, 30).Obj(),
			want: [][4]int64{{8000, 40, 2, 0}}},
		{name: "init and app share: max of each", // mem max(81920, 40960), cores max(100, 50), tenants max(1, 1), exclusive from the init
			node: pt.Node("n1").GPUs(1, a100, mib).Obj(), req: pt.Req().Init(1, mib, 100).GPUs(1, 40960, 50).Obj(),
			want: [][4]int64{{mib, 100, 1, 1}}},
		{name: "init containers take the max among themselves", // max(2000, 6000) vs app 3000+1000 = 4000
			node: pt.Node("n1").GPUs(1, a100, mib).Obj(),
			req:  pt.Req().Init(1, 2000, 5).Init(1, 6000, 5).GPUs(1, 3000, 10).GPUs(1, 1000, 10).Obj(),
			want: [][4]int64{{6000, 20, 2, 0}}},
		{name: "sidecar adds to the app containers", // 2000 + 3000 MiB, 5 + 10 cores, 2 tenants
			node: pt.Node("n1").GPUs(1, a100, mib).Obj(), req: pt.Req().Sidecar(1, 2000, 5).GPUs(1, 3000, 10).Obj(),
			want: [][4]int64{{5000, 15, 2, 0}}},
		{name: "init after a sidecar counts beside it", // max(2000 + 6000 init, 2000 + 1000 app), tenants max(2, 2)
			node: pt.Node("n1").GPUs(1, a100, mib).Obj(), req: pt.Req().Sidecar(1, 2000, 5).Init(1, 6000, 20).GPUs(1, 1000, 10).Obj(),
			want: [][4]int64{{8000, 25, 2, 0}}},
		{name: "init before a sidecar counts alone", // max(6000 init, 2000 + 1000), cores max(20, 15)
			node: pt.Node("n1").GPUs(1, a100, mib).Obj(), req: pt.Req().Init(1, 6000, 20).Sidecar(1, 2000, 5).GPUs(1, 1000, 10).Obj(),
			want: [][4]int64{{6000, 20, 2, 0}}},
		{name: "exclusive app container",
			node: pt.Node("n1").GPUs(2, a100, mib).Use(0, 1, 1).Obj(), req: pt.Req().GPUs(1, 0, 100).Obj(),
			want: [][4]int64{{1, 1, 1, 0}, {mib, 100, 1, 1}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, reasons := placement.Fit(tt.req, tt.node, nil)
			if len(reasons) > 0 {
				t.Fatalf("Fit: %v", reasons)
			}
			before := tt.node.Clone()
			if err := placement.Apply(tt.node, p); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, usageOf(tt.node)); diff != "" {
				t.Errorf("usage after Apply (-want +got):\n%s", diff)
			}
			if err := placement.Release(tt.node, p); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(before, tt.node, allowLinks); diff != "" {
				t.Errorf("Release is not the inverse of Apply (-before +after):\n%s", diff)
			}
		})
	}
}

func TestReleaseNeverUnderflows(t *testing.T) {
	node := pt.Node("n1").GPUs(2, a100, mib).Use(1, 1024, 10).Obj()
	p, _ := placement.Fit(pt.Req().GPUs(2, 4096, 20).Obj(), node, nil)
	before := node.Clone()
	// GPU0 holds nothing, GPU1 holds 1024 MiB < 4096: nothing may change.
	if err := placement.Release(node, p); !errors.Is(err, placement.ErrUnderflow) {
		t.Fatalf("Release of an unbooked placement: error = %v, want ErrUnderflow", err)
	}
	if diff := cmp.Diff(before, node, allowLinks); diff != "" {
		t.Errorf("failed Release changed the node (-before +after):\n%s", diff)
	}
	if err := placement.Apply(node, p); err != nil {
		t.Fatal(err)
	}
	if err := placement.Release(node, p); err != nil {
		t.Fatal(err)
	}
	if err := placement.Release(node, p); !errors.Is(err, placement.ErrUnderflow) {
		t.Errorf("double Release: error = %v, want ErrUnderflow", err)
	}
	if diff := cmp.Diff(before, node, allowLinks); diff != "" {
		t.Errorf("double Release changed the node (-before +after):\n%s", diff)
	}
}

func TestApplyErrors(t *testing.T) {
	node := pt.Node("n1").GPUs(1, a100, mib).Obj()
	before := node.Clone()
	unknown := placement.Placement{Node: "n1", Containers: []placement.ContainerPlacement{{Devices: []placement.Device{
		{Pos: 0, UUID: "GPU-n1-0", MemoryMiB: 1}, {Pos: 1, UUID: "GPU-gone", MemoryMiB: 1}}}}}
	if err := placement.Apply(node, unknown); !errors.Is(err, placement.ErrUnknownGPU) {
		t.Errorf("Apply with an unknown GPU: error = %v, want ErrUnknownGPU", err)
	}
	other := placement.Placement{Node: "n2"}
	if err := placement.Apply(node, other); !errors.Is(err, placement.ErrWrongNode) {
		t.Errorf("Apply on another node: error = %v, want ErrWrongNode", err)
	}
	if diff := cmp.Diff(before, node, allowLinks); diff != "" {
		t.Errorf("failed Apply changed the node (-before +after):\n%s", diff)
	}
	// UUID is authoritative, Pos only a hint: a rebuilt placement may not know positions.
	byUUID := placement.Placement{Containers: []placement.ContainerPlacement{{Devices: []placement.Device{{Pos: -1, UUID: "GPU-n1-0", MemoryMiB: 7}}}}}
	if err := placement.Apply(node, byUUID); err != nil || node.GPUs[0].UsedMemoryMiB != 7 {
		t.Errorf("Apply by UUID: error %v, used %d MiB, want 7", err, node.GPUs[0].UsedMemoryMiB)
	}
}

func TestCloneIsDeep(t *testing.T) {
	orig := pt.Node("n1").GPUs(2, a100, mib).NVLinkPairs().Obj()
	want := orig.Clone()
	c := orig.Clone()
	c.GPUs[0].UsedMemoryMiB = 99
	c.Links.Set(0, 1, placement.Link{NVLinks: 1})
	if err := placement.Apply(c, placement.Placement{Containers: []placement.ContainerPlacement{{Devices: []placement.Device{{UUID: "GPU-n1-1", MemoryMiB: 5}}}}}); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, orig, allowLinks); diff != "" {
		t.Errorf("changing a clone changed the original (-want +got):\n%s", diff)
	}
	p, _ := placement.Fit(pt.Req().GPUs(2, 1024, 1).Obj(), orig, nil)
	kept := p.Clone()
	p.Containers[0].Devices[0].MemoryMiB = 1
	if kept.Containers[0].Devices[0].MemoryMiB != 1024 {
		t.Errorf("Placement.Clone shares devices with the original")
	}
}

func TestFitterReuse(t *testing.T) {
	// One Fitter, many calls: results equal fresh Fit calls.
	var f placement.Fitter
	nodes := []*placement.Node{eight().NVLinkPairs().Use(0, 8192, 10).Obj(), eight().NVSwitch().Exclusive(3).Obj(), pt.Node("x").GPUs(2, t4, 15360).Obj()}
	reqs := []*placement.Request{pt.Req().GPUs(2, 4096, 10).Obj(), pt.Req().GPUs(1, 1024, 10).Init(1, 2048, 5).Obj(), pt.Req().GPUs(4, 60000, 10).Obj()}
	for round := 0; round < 3; round++ {
		for _, n := range nodes {
			for _, r := range reqs {
				got, gr := f.Fit(r, n, nil)
				want, wr := placement.Fit(r, n, nil)
				if diff := cmp.Diff(want, got); diff != "" {
					t.Errorf("%s: reused Fitter differs (-fresh +reused):\n%s", n.Name, diff)
				}
				if diff := cmp.Diff(wr, gr); diff != "" {
					t.Errorf("%s: reused Fitter reasons differ (-fresh +reused):\n%s", n.Name, diff)
				}
			}
		}
	}
}
