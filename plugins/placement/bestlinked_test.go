package placement_test

import (
	"testing"

	"github.com/volcano-vgpu/volcano-vgpu/plugins/placement"
	pt "github.com/volcano-vgpu/volcano-vgpu/plugins/placement/placementtest"
)

func TestBestLinked(t *testing.T) {
	devs := func(node string, pos ...int) []placement.Device {
		var out []placement.Device
		for _, p := range pos {
			out = append(out, placement.Device{Pos: p, UUID: "GPU-" + node + "-" + string(rune('0'+p))})
		}
		return out
	}
	req := pt.Req().GPUs(2, 1024, 10).Obj()
	for _, tc := range []struct {
		name string
		node *placement.Node
		req  *placement.Request
		devs []placement.Device
		want bool
	}{
		{name: "an NVLink pair", node: pt.Node("n").GPUs(4, a100, mib).NVLinkPairs().Obj(), req: req, devs: devs("n", 2, 3), want: true},
		{name: "across pairs", node: pt.Node("n").GPUs(4, a100, mib).NVLinkPairs().Obj(), req: req, devs: devs("n", 1, 2), want: false},
		{name: "the pair is unhealthy: PCIe is the best", node: pt.Node("n").GPUs(4, a100, mib).NVLinkPairs().Unhealthy(1, 3).Obj(), req: req, devs: devs("n", 0, 2), want: true},
		{name: "held pair still counts as best", node: pt.Node("n").GPUs(4, a100, mib).NVLinkPairs().Exclusive(0).Exclusive(1).Obj(), req: req, devs: devs("n", 1, 2), want: false},
		{name: "NVSwitch: any set", node: pt.Node("n").GPUs(8, a100, mib).NVSwitch().Obj(), req: pt.Req().GPUs(4, 1024, 10).Obj(), devs: devs("n", 0, 3, 5, 7), want: true},
		{name: "no link matrix: nothing beats PCIe", node: pt.Node("n").GPUs(4, a100, mib).NoLinkMatrix().Obj(), req: req, devs: devs("n", 0, 3), want: true},
		{name: "one GPU is no set", node: pt.Node("n").GPUs(4, a100, mib).NVLinkPairs().Obj(), req: pt.Req().GPUs(1, 1024, 10).Obj(), devs: devs("n", 0), want: false},
		{name: "a GPU not on the node", node: pt.Node("n").GPUs(4, a100, mib).NVLinkPairs().Obj(), req: req, devs: devs("other", 0, 1), want: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var f placement.Fitter
			if err := tc.req.Normalize(placement.Defaults{}); err != nil {
				t.Fatal(err)
			}
			if got := f.BestLinked(tc.req, tc.node, tc.devs); got != tc.want {
				t.Errorf("BestLinked = %v, want %v", got, tc.want)
			}
		})
	}
}
