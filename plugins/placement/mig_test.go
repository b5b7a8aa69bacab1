package placement_test

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/volcano-vgpu/volcano-vgpu/api"
	"github.com/volcano-vgpu/volcano-vgpu/plugins/placement"
	pt "github.com/volcano-vgpu/volcano-vgpu/plugins/placement/placementtest"
)

const a100x40 = "NVIDIA A100-SXM4-40GB"

// migAt is the MIG instance a container gets on GPU pos.
type migAt struct {
	Pos       int
	Profile   string
	Start     int
	Size      int
	UUID      string // an existing instance taken over
	MemoryMiB int64
	Cores     int
}

func migOf(p placement.Placement) []migAt {
	var out []migAt
	for _, c := range p.Containers {
		for _, d := range c.Devices {
			out = append(out, migAt{d.Pos, d.MIG.Profile, d.MIG.Placement.Start, d.MIG.Placement.Size, d.MIG.UUID, d.MemoryMiB, d.Cores})
		}
	}
	return out
}

// migNode: n A100 40GB GPUs in mode mig, on-demand.
func migNode(n int) *pt.NodeBuilder {
	return pt.Node("n1").GPUs(n, a100x40, 40960).MIG(pt.MIGA100x40())
}

func migReq(memMiB int64) *pt.RequestBuilder {
	return pt.Req().GPUs(1, memMiB, 0).Mode(api.ModeMIG)
}

func TestFitMIG(t *testing.T) {
	tests := []struct {
		name      string
		node      *placement.Node
		req       *placement.Request
		want      []migAt
		wantCodes []placement.Code // node-level, when it does not fit
	}{
		// memory maps to the smallest profile that holds it
		{name: "4 GiB: the 1g.5gb, on the slice that keeps a 4g and a 3g placeable", // slice 6: 4g.20gb at 0 stays
			node: migNode(1).Obj(), req: migReq(4096).Obj(), want: []migAt{{0, "1g.5gb", 6, 1, "", 4096, 14}}},
		{name: "8 GiB: the 1g.10gb (1 compute slice) over the 2g.10gb (2)", // both 9856 MiB
			node: migNode(1).Obj(), req: migReq(8192).Obj(), want: []migAt{{0, "1g.10gb", 6, 2, "", 8192, 14}}},
		{name: "19000 MiB: the 3g.20gb over the 4g.20gb", node: migNode(1).Obj(), req: migReq(19000).Obj(),
			want: []migAt{{0, "3g.20gb", 4, 4, "", 19000, 42}}},
		{name: "20000 MiB: past every 20gb profile, the 7g.40gb", node: migNode(1).Obj(), req: migReq(20000).Obj(),
			want: []migAt{{0, "7g.40gb", 0, 8, "", 20000, 100}}},
		{name: "no memory asked: the whole GPU", node: migNode(1).Obj(), req: pt.Req().GPUs(1, 0, 100).Mode(api.ModeMIG).Obj(),
			want: []migAt{{0, "7g.40gb", 0, 8, "", 40192, 100}}},
		{name: "half the GPU's memory: 20480 MiB, the 7g.40gb", node: migNode(1).Obj(), req: pt.Req().Percent(1, 50, 0).Mode(api.ModeMIG).Obj(),
			want: []migAt{{0, "7g.40gb", 0, 8, "", 20480, 100}}},
		{name: "a named profile, media engines included", node: migNode(1).Obj(), req: migReq(1024).MIGProfile("1g.5gb+me").Obj(),
			want: []migAt{{0, "1g.5gb+me", 6, 1, "", 1024, 14}}},
		// the cap inside the instance: the ask when the profile has more memory
		{name: "4096 MiB on a named 1g.10gb: capped at the ask, not at the profile's 9856", node: migNode(1).Obj(), req: migReq(4096).MIGProfile("1g.10gb").Obj(),
			want: []migAt{{0, "1g.10gb", 6, 2, "", 4096, 14}}},
		{name: "an ask of exactly the profile's memory", node: migNode(1).Obj(), req: migReq(4864).Obj(),
			want: []migAt{{0, "1g.5gb", 6, 1, "", 4864, 14}}},
		{name: "a named profile larger than the memory asks", node: migNode(1).Obj(), req: migReq(1024).MIGProfile("4g.20gb").Obj(),
			want: []migAt{{0, "4g.20gb", 0, 4, "", 1024, 57}}},

		// geometry locking: existing and booked instances fix what fits around them
		{name: "an idle instance of the profile is taken over", node: migNode(1).Instance(0, "3g.20gb", 0, "MIG-a").Obj(), req: migReq(19000).Obj(),
			want: []migAt{{0, "3g.20gb", 0, 4, "MIG-a", 19000, 42}}},
		{name: "an instance in use is not", node: migNode(1).InstanceInUse(0, "3g.20gb", 0, "MIG-a").Obj(), req: migReq(19000).Obj(),
			want: []migAt{{0, "3g.20gb", 4, 4, "", 19000, 42}}},
		{name: "a 2g after a booked 3g on the first half: slices 4-5", node: migNode(1).HoldMIG(0, 0, 4).Obj(), req: migReq(9000).MIGProfile("2g.10gb").Obj(),
			want: []migAt{{0, "2g.10gb", 4, 2, "", 9000, 28}}},
		{name: "an idle instance of another profile is not broken up", // the 4g at 0-3 stays; the 7g has no room
			node: migNode(1).Instance(0, "4g.20gb", 0, "MIG-a").Obj(), req: migReq(20000).Obj(),
			wantCodes: []placement.Code{placement.CodeMIGNoFit}},
		{name: "fixed geometry: its free instances only, the smallest that holds the ask", // no 1g.5gb there
			node: migNode(1).Fixed(0).Instance(0, "3g.20gb", 0, "MIG-a").Instance(0, "2g.10gb", 4, "MIG-b").Instance(0, "1g.10gb", 6, "MIG-c").Obj(),
			req:  migReq(1024).Obj(), want: []migAt{{0, "1g.10gb", 6, 2, "MIG-c", 1024, 14}}},
		{name: "fixed geometry, its instances booked: full", node: migNode(1).Fixed(0).Instance(0, "7g.40gb", 0, "MIG-a").HoldMIG(0, 0, 8).Obj(),
			req: migReq(1024).Obj(), wantCodes: []placement.Code{placement.CodeMIGNoFit}},

		// fragmentation
		{name: "a 1g instance in slice 1 leaves the 3g the second half", node: migNode(1).InstanceInUse(0, "1g.5gb", 1, "MIG-a").Obj(),
			req: migReq(1024).MIGProfile("3g.20gb").Obj(), want: []migAt{{0, "3g.20gb", 4, 4, "", 1024, 42}}},
		{name: "1g instances in slices 1 and 5 leave no 3g placement", node: migNode(1).InstanceInUse(0, "1g.5gb", 1, "MIG-a").InstanceInUse(0, "1g.5gb", 5, "MIG-b").Obj(),
			req: migReq(1024).MIGProfile("3g.20gb").Obj(), wantCodes: []placement.Code{placement.CodeMIGNoFit}},
		{name: "slices 0-6 taken: slice 7 alone is no placement", node: migNode(1).HoldMIG(0, 0, 6).InstanceInUse(0, "1g.5gb", 6, "MIG-a").Obj(),
			req: migReq(1024).Obj(), wantCodes: []placement.Code{placement.CodeMIGNoFit}},
		{name: "one media-engine instance per GPU, free slices or not", node: migNode(1).InstanceInUse(0, "1g.5gb+me", 0, "MIG-a").Obj(),
			req: migReq(1024).MIGProfile("1g.5gb+me").Obj(), wantCodes: []placement.Code{placement.CodeMIGNoFit}},
		{name: "two media-engine containers in one pod", node: migNode(1).Obj(),
			req: pt.Req().GPUs(1, 1024, 0).GPUs(1, 1024, 0).MIGProfile("1g.5gb+me").Obj(), wantCodes: []placement.Code{placement.CodeMIGNoFit}},
		{name: "an idle media-engine instance is taken over", node: migNode(1).Instance(0, "1g.5gb+me", 2, "MIG-a").Obj(),
			req: migReq(1024).MIGProfile("1g.5gb+me").Obj(), want: []migAt{{0, "1g.5gb+me", 2, 1, "MIG-a", 1024, 14}}},

		// between GPUs
		{name: "binpack: the MIG GPU with more slices held", node: migNode(2).HoldMIG(1, 0, 4).Obj(), req: migReq(1024).Obj(),
			want: []migAt{{1, "1g.5gb", 6, 1, "", 1024, 14}}},
		{name: "spread: the emptier MIG GPU", node: migNode(2).HoldMIG(1, 0, 4).Obj(), req: migReq(1024).Policy(placement.Spread).Obj(),
			want: []migAt{{0, "1g.5gb", 6, 1, "", 1024, 14}}},
		{name: "the smaller instance wins over binpack", // GPU 1 has only a 3g left for 4 GiB (its 1g slices held)
			node: migNode(2).HoldMIG(1, 0, 4).HoldMIG(1, 4, 3).Obj(), req: migReq(4096).Obj(),
			want: []migAt{{0, "1g.5gb", 6, 1, "", 4096, 14}}},
		{name: "each container its own instance", node: migNode(1).Obj(),
			req:  pt.Req().GPUs(1, 1024, 0).GPUs(1, 1024, 0).Mode(api.ModeMIG).Obj(),
			want: []migAt{{0, "1g.5gb", 6, 1, "", 1024, 14}, {0, "1g.5gb", 4, 1, "", 1024, 14}}}, // 4 and 5 leave as much room: the lower

		// mixed node: GPU 0 a MIG A100, GPU 1 a shared A100
		{name: "mixed node: a MIG ask on the MIG GPU", node: pt.Node("n1").GPUs(2, a100x40, 40960).MIG(pt.MIGA100x40(), 0).Use(1, 1024, 10).Obj(),
			req: migReq(1024).Obj(), want: []migAt{{0, "1g.5gb", 6, 1, "", 1024, 14}}},
		{name: "mixed node: a fractional ask on the shared GPU", node: pt.Node("n1").GPUs(2, a100x40, 40960).MIG(pt.MIGA100x40(), 0).HoldMIG(0, 0, 4).Obj(),
			req: pt.Req().GPUs(1, 1024, 10).Obj(), want: []migAt{{Pos: 1, MemoryMiB: 1024, Cores: 10}}},
		{name: "mixed node: the shared GPU full, a fractional ask stays pending", node: pt.Node("n1").GPUs(2, a100x40, 40960).MIG(pt.MIGA100x40(), 0).Exclusive(1).Obj(),
			req: pt.Req().GPUs(1, 1024, 10).Obj(), wantCodes: []placement.Code{placement.CodeExclusiveHeld}},
		{name: "only MIG GPUs: a fractional ask stays pending", node: migNode(2).Obj(),
			req: pt.Req().GPUs(1, 1024, 10).Obj(), wantCodes: []placement.Code{placement.CodeMIGOnly}},
		{name: "a MIG ask on a node without MIG GPUs", node: pt.Node("n1").GPUs(2, a100x40, 40960).Obj(),
			req: migReq(1024).Obj(), wantCodes: []placement.Code{placement.CodeTooFewInMode}},
		{name: "an ask past a named profile's memory: refused, not capped", node: migNode(1).Obj(), req: migReq(12000).MIGProfile("1g.10gb").Obj(),
			wantCodes: []placement.Code{placement.CodeMIGProfileSmall}}, // 9856 < 12000
		{name: "a named profile too small, the other MIG GPU unhealthy: the node-level reason stays no fit", node: migNode(2).Unhealthy(1).Obj(),
			req: migReq(12000).MIGProfile("1g.10gb").Obj(), wantCodes: []placement.Code{placement.CodeMIGNoFit}},
		{name: "a named profile no GPU has", node: migNode(1).Obj(), req: migReq(1024).MIGProfile("1g.12gb").Obj(),
			wantCodes: []placement.Code{placement.CodeMIGNoFit}},
		{name: "a MIG GPU without published profiles", node: pt.Node("n1").GPUs(1, a100x40, 40960).Mode(api.ModeMIG).Obj(),
			req: migReq(1024).Obj(), wantCodes: []placement.Code{placement.CodeMIGNoFit}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, reasons := placement.Fit(tc.req, tc.node, nil)
			if d := cmp.Diff(tc.wantCodes, nodeCodes(reasons)); d != "" {
				t.Fatalf("node-level reason codes (-want +got):\n%s\nreasons: %v", d, messages(reasons))
			}
			if d := cmp.Diff(tc.want, migOf(p)); d != "" {
				t.Errorf("instances (-want +got):\n%s", d)
			}
			for _, r := range reasons {
				if r.NodeLevel() && tc.req.Mode == api.ModeMIG && r.Code == placement.CodeMIGNoFit && !errors.Is(r, placement.ErrMIG) {
					t.Errorf("reason %v does not unwrap to ErrMIG", r)
				}
			}
		})
	}
}

func TestMIGReasons(t *testing.T) {
	tests := []struct {
		name      string
		node      *placement.Node
		req       *placement.Request
		want      []string
		wantShort []string
	}{
		{name: "no free 3g placement", node: pt.Node("n1").GPUs(1, a100x40, 40960).MIG(pt.MIGA100x40()).InstanceInUse(0, "1g.5gb", 1, "MIG-a").InstanceInUse(0, "1g.5gb", 5, "MIG-b").Obj(),
			req: migReq(1024).MIGProfile("3g.20gb").Obj(),
			want: []string{
				`GPU-n1-0 (NVIDIA A100-SXM4-40GB): no free placement for a 3g.20gb instance (its memory slices are held by other instances)`,
				`container "c0": no MIG GPU with a free placement for a 3g.20gb instance (1 GPU in mig mode)`,
			},
			wantShort: []string{`container "c0": no MIG GPU with a free placement for a 3g.20gb instance`}},
		{name: "memory larger than every profile, next to a shared GPU", node: pt.Node("n1").GPUs(2, a100x40, 40960).MIG(pt.MIGA100x40(), 0).Obj(),
			req: migReq(50000).Obj(),
			want: []string{
				`GPU-n1-0 (NVIDIA A100-SXM4-40GB): no MIG profile gives an instance with 50000 MiB`,
				`GPU-n1-1 (NVIDIA A100-SXM4-40GB): in time-sliced (hami-core) mode, not the one volcano.sh/vgpu-mode asks`,
				`container "c0": no MIG GPU with a free placement for an instance with 50000 MiB (1 GPU in mig mode)`,
			},
			wantShort: []string{`container "c0": no MIG GPU with a free placement for an instance with 50000 MiB`}},
		{name: "a named profile smaller than the ask", node: pt.Node("n1").GPUs(2, a100x40, 40960).MIG(pt.MIGA100x40(), 0).Obj(),
			req: migReq(12000).MIGProfile("1g.10gb").Obj(), // 1g.10gb: 9856 MiB on an A100-40GB
			want: []string{
				`GPU-n1-0 (NVIDIA A100-SXM4-40GB): its 1g.10gb MIG profile has 9856 MiB, less than the 12000 MiB container "c0" asks`,
				`GPU-n1-1 (NVIDIA A100-SXM4-40GB): in time-sliced (hami-core) mode, not the one volcano.sh/vgpu-mode asks`,
				`container "c0": the 1g.10gb MIG profile has 9856 MiB, container "c0" asks 12000 MiB: name a larger profile (volcano-vgpu.io/mig-profile) or ask at most 9856 MiB`,
			},
			// the profile's memory stays in the short text: the same on every node of that model
			wantShort: []string{`container "c0": the 1g.10gb MIG profile has 9856 MiB, container "c0" asks 12000 MiB: name a larger profile (volcano-vgpu.io/mig-profile) or ask at most 9856 MiB`}},
		{name: "a fractional ask on MIG GPUs", node: pt.Node("n1").GPUs(1, a100x40, 40960).MIG(pt.MIGA100x40()).Obj(),
			req: pt.Req().GPUs(1, 1024, 10).Obj(),
			want: []string{
				`GPU-n1-0 (NVIDIA A100-SXM4-40GB): in mig mode: it serves MIG instances (volcano.sh/vgpu-mode: mig), not shares of the GPU`,
				`container "c0": no GPU outside mig mode (MIG GPUs serve pods with volcano.sh/vgpu-mode: mig)`,
			},
			wantShort: []string{`container "c0": no GPU outside mig mode (MIG GPUs serve pods with volcano.sh/vgpu-mode: mig)`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, reasons := placement.Fit(tt.req, tt.node, nil)
			if diff := cmp.Diff(tt.want, messages(reasons)); diff != "" {
				t.Errorf("reasons (-want +got):\n%s", diff)
			}
			var short []string
			for _, r := range reasons {
				if r.NodeLevel() {
					short = append(short, r.Short())
				}
			}
			if diff := cmp.Diff(tt.wantShort, short); diff != "" {
				t.Errorf("short reasons (-want +got):\n%s", diff)
			}
		})
	}
}

// Instances booked earlier in the session (Apply) are held for the next
// Fit; Release frees them, and only what was booked.
func TestMIGApplyRelease(t *testing.T) {
	node := migNode(1).Obj()
	req := migReq(19000).Obj()
	first, reasons := placement.Fit(req, node, nil)
	if reasons != nil {
		t.Fatal(messages(reasons))
	}
	first = first.Clone()
	if err := placement.Apply(node, first); err != nil {
		t.Fatal(err)
	}
	second, reasons := placement.Fit(req, node, nil)
	if reasons != nil {
		t.Fatal(messages(reasons))
	}
	second = second.Clone()
	if a, b := migOf(first)[0], migOf(second)[0]; a.Start == b.Start {
		t.Fatalf("both 3g.20gb instances at slice %d", a.Start)
	}
	if err := placement.Apply(node, second); err != nil {
		t.Fatal(err)
	}
	if _, reasons := placement.Fit(req, node, nil); len(reasons) == 0 {
		t.Error("a third 3g.20gb fitted on an A100 holding two")
	}
	if err := placement.Release(node, first); err != nil {
		t.Fatal(err)
	}
	if err := placement.Release(node, first); !errors.Is(err, placement.ErrUnderflow) {
		t.Errorf("releasing an instance twice: %v, want ErrUnderflow", err)
	}
	if got := node.GPUs[0].MIGHeld; got != 0xF0 && got != 0x0F { // one half of 0xFF
		t.Errorf("held slices after releasing one of two halves: %08b", got)
	}
	if _, reasons := placement.Fit(req, node, nil); reasons != nil {
		t.Errorf("the released half does not fit again: %v", messages(reasons))
	}
}

// BenchmarkFitMIG: a MIG ask on an 8-GPU MIG node whose GPUs hold two 1g
// instances each, booked by earlier pods (Fit, then Apply, as the session does).
func BenchmarkFitMIG(b *testing.B) {
	node := pt.Node("n").GPUs(8, a100x40, 40960).MIG(pt.MIGA100x40()).Obj()
	var f placement.Fitter
	for range 16 {
		p, reasons := f.Fit(migReq(4096).Policy(placement.Spread).Obj(), node, nil)
		if len(reasons) > 0 {
			b.Fatal(messages(reasons))
		}
		if err := placement.Apply(node, p.Clone()); err != nil {
			b.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name string
		req  *placement.Request
	}{{"memory", migReq(4096).Obj()}, {"profile", migReq(0).MIGProfile("3g.20gb").Obj()}} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, reasons := f.Fit(tc.req, node, nil); len(reasons) > 0 {
					b.Fatal(messages(reasons))
				}
			}
		})
	}
}
