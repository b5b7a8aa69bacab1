package placement_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/volcano-vgpu/volcano-vgpu/api"
	"github.com/volcano-vgpu/volcano-vgpu/plugins/placement"
	pt "github.com/volcano-vgpu/volcano-vgpu/plugins/placement/placementtest"
)

// TestFitVolcanoAnnotations: what Volcano deviceshare's pod annotations
// (parsed by api.ParsePodOptions into the Request) do to a placement.
func TestFitVolcanoAnnotations(t *testing.T) {
	// GPUs 0-1 time-sliced, 2-3 in MIG mode.
	mixedModes := func() *pt.NodeBuilder {
		return pt.Node("n1").GPUs(4, a100, mib).Mode(api.ModeTimeSliced, 0, 1).MIG(pt.MIGA100x40(), 2, 3)
	}
	sibling := func(gpus ...string) *placement.GangView {
		return &placement.GangView{Placed: map[string]placement.Siblings{"n1": {Tasks: len(gpus), GPUs: gpus}}, PlacedTasks: len(gpus)}
	}
	tests := []struct {
		name      string
		node      *placement.Node
		req       *placement.Request
		gang      *placement.GangView
		want      [][]int
		wantCodes []placement.Code
		wantErr   error // the node-level reasons unwrap to it
	}{
		{name: "no mode asked: any GPU, mode unset meaning time-sliced", node: eight().Obj(),
			req: pt.Req().GPUs(1, 1024, 10).Obj(), want: [][]int{{0}}},
		{name: "hami-core lands on a time-sliced GPU", node: mixedModes().Use(2, 1024, 10).Obj(), // binpack would prefer GPU 2
			req: pt.Req().GPUs(1, 1024, 10).Mode(api.ModeTimeSliced).Obj(), want: [][]int{{0}}},
		{name: "mig lands only on a MIG GPU", node: mixedModes().Use(0, 1024, 10).Obj(), // binpack would prefer GPU 0
			req: pt.Req().GPUs(1, 1024, 10).Mode(api.ModeMIG).Obj(), want: [][]int{{2}}},
		{name: "mig on a node of time-sliced GPUs stays pending", node: eight().Obj(),
			req: pt.Req().GPUs(1, 1024, 10).Mode(api.ModeMIG).Obj(), wantCodes: []placement.Code{placement.CodeTooFewInMode}, wantErr: placement.ErrMode},
		{name: "mps on a node of time-sliced GPUs stays pending", node: eight().Obj(),
			req: pt.Req().GPUs(1, 1024, 10).Mode(api.ModeMPS).Obj(), wantCodes: []placement.Code{placement.CodeTooFewInMode}, wantErr: placement.ErrMode},
		{name: "mps lands only on an MPS GPU", node: pt.Node("n1").GPUs(2, a100, mib).Mode(api.ModeMPS, 1).Use(0, 1024, 10).Obj(), // binpack would prefer GPU 0
			req: pt.Req().GPUs(1, 1024, 10).Mode(api.ModeMPS).Obj(), want: [][]int{{1}}},
		{name: "no mode asked, 2 GPUs: never MPS GPUs (one GPU per MPS container)", node: pt.Node("n1").GPUs(4, a100, mib).Mode(api.ModeMPS, 0, 1).Obj(),
			req: pt.Req().GPUs(2, 1024, 10).Obj(), want: [][]int{{2, 3}}},
		{name: "no mode asked, 2 GPUs, only MPS GPUs: pending", node: pt.Node("n1").GPUs(2, a100, mib).Mode(api.ModeMPS, 0, 1).Obj(),
			req: pt.Req().GPUs(2, 1024, 10).Obj(), wantCodes: []placement.Code{placement.CodeMPSOneGPU}, wantErr: placement.ErrMode},
		{name: "whole GPU, no mode, on an MPS GPU", node: pt.Node("n1").GPUs(1, a100, mib).Mode(api.ModeMPS, 0).Obj(),
			req: pt.Req().GPUs(1, 1024, 100).Obj(), want: [][]int{{0}}},
		{name: "2 GPUs per container in mig mode: one MIG instance per container", node: mixedModes().Obj(),
			req: pt.Req().GPUs(2, 1024, 10).Mode(api.ModeMIG).Obj(), wantCodes: []placement.Code{placement.CodeInvalidRequest}, wantErr: placement.ErrInvalidRequest},
		{name: "no mode asked: never a MIG GPU", node: mixedModes().Use(0, 1024, 10).Use(1, 1024, 10).Use(2, 1024, 10).Obj(), // binpack would prefer GPU 2
			req: pt.Req().GPUs(2, 1024, 10).Obj(), want: [][]int{{0, 1}}},
		{name: "no mode asked, only MIG GPUs left: pending", node: mixedModes().Exclusive(0).Exclusive(1).Obj(),
			req: pt.Req().GPUs(1, 1024, 10).Obj(), wantCodes: []placement.Code{placement.CodeExclusiveHeld}, wantErr: placement.ErrExclusive},
		{name: "use-gpuuuid naming one GPU lands there", node: eight().Use(0, 1024, 10).Obj(), // binpack would prefer GPU 0
			req: pt.Req().GPUs(1, 1024, 10).UUIDInclude("GPU-n1-6").Obj(), want: [][]int{{6}}},
		{name: "use-gpuuuid naming a full GPU stays unschedulable, never elsewhere", node: eight().Exclusive(6).Obj(),
			req: pt.Req().GPUs(1, 1024, 10).UUIDInclude("GPU-n1-6").Obj(), wantCodes: []placement.Code{placement.CodeExclusiveHeld}},
		{name: "use-gpuuuid naming a GPU of another node", node: eight().Obj(),
			req: pt.Req().GPUs(1, 1024, 10).UUIDInclude("GPU-n2-0").Obj(), wantCodes: []placement.Code{placement.CodeTooFewMatching}, wantErr: placement.ErrFiltered},
		{name: "nouse-gpuuuid wins over use-gpuuuid", node: eight().Obj(), // Volcano: "the denylist takes precedence"
			req: pt.Req().GPUs(1, 1024, 10).UUIDInclude("GPU-n1-1", "GPU-n1-2").UUIDExclude("GPU-n1-1").Obj(), want: [][]int{{2}}},
		{name: "nouse-gpuuuid alone", node: pt.Node("n1").GPUs(2, a100, mib).Use(0, 1024, 10).Obj(),
			req: pt.Req().GPUs(1, 1024, 10).UUIDExclude("GPU-n1-0").Obj(), want: [][]int{{1}}},
		{name: "type in deviceshare's NVIDIA- form", node: mixed(),
			req: pt.Req().GPUs(1, 1024, 10).TypeInclude("NVIDIA-NVIDIA A100").Obj(), want: [][]int{{1}}},
		{name: "type exclude in deviceshare's NVIDIA- form", node: mixed(),
			req: pt.Req().GPUs(1, 1024, 10).TypeExclude("nvidia-nvidia a100").Obj(), want: [][]int{{0}}},
		{name: "podgroup spread avoids a sibling's GPU", node: pt.Node("n1").GPUs(2, a100, mib).Use(0, 1024, 10).Obj(),
			req: pt.Req().GPUs(1, 1024, 10).SpreadGroup().Obj(), gang: sibling("GPU-n1-0"), want: [][]int{{1}}},
		{name: "without podgroup spread binpack joins the sibling", node: pt.Node("n1").GPUs(2, a100, mib).Use(0, 1024, 10).Obj(),
			req: pt.Req().GPUs(1, 1024, 10).Obj(), gang: sibling("GPU-n1-0"), want: [][]int{{0}}},
		{name: "podgroup spread with every GPU holding a sibling", node: pt.Node("n1").GPUs(2, a100, mib).Use(0, 1024, 10).Use(1, 1024, 10).Obj(),
			req: pt.Req().GPUs(1, 1024, 10).SpreadGroup().Obj(), gang: sibling("GPU-n1-0", "GPU-n1-1"),
			wantCodes: []placement.Code{placement.CodeGroupShared}, wantErr: placement.ErrGroupShared},
		{name: "podgroup spread with siblings on another node", node: pt.Node("n1").GPUs(1, a100, mib).Obj(),
			req:  pt.Req().GPUs(1, 1024, 10).SpreadGroup().Obj(),
			gang: &placement.GangView{Placed: map[string]placement.Siblings{"n2": {Tasks: 1, GPUs: []string{"GPU-n2-0"}}}, PlacedTasks: 1},
			want: [][]int{{0}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p, reasons := placement.Fit(tt.req, tt.node, tt.gang)
			if diff := cmp.Diff(tt.wantCodes, nodeCodes(reasons)); diff != "" {
				t.Fatalf("node-level reason codes (-want +got):\n%s\nreasons: %v", diff, reasons)
			}
			if tt.wantErr != nil {
				for _, r := range reasons {
					if r.NodeLevel() && !errors.Is(r, tt.wantErr) {
						t.Errorf("reason %q does not unwrap to %v", r.Error(), tt.wantErr)
					}
				}
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

func TestVolcanoAnnotationReasons(t *testing.T) {
	tests := []struct {
		name      string
		node      *placement.Node
		req       *placement.Request
		gang      *placement.GangView
		want      []string
		wantShort []string
	}{
		{name: "mig asked, node time-sliced", node: pt.Node("n1").GPUs(1, "A100-80GB", mib).Obj(),
			req: pt.Req().GPUs(1, 1024, 10).Mode(api.ModeMIG).Obj(),
			want: []string{
				`GPU-n1-0 (A100-80GB): in time-sliced (hami-core) mode, not the one volcano.sh/vgpu-mode asks`,
				`container "c0": volcano.sh/vgpu-mode: mig: no GPU in mig mode on this node`,
			},
			wantShort: []string{`container "c0": volcano.sh/vgpu-mode: mig: no GPU in mig mode on this node`}},
		{name: "hami-core asked, 2 GPUs, 1 time-sliced", node: pt.Node("n1").GPUs(2, "A100-80GB", mib).Mode(api.ModeMIG, 1).Obj(),
			req: pt.Req().GPUs(2, 1024, 10).Mode(api.ModeTimeSliced).Obj(),
			want: []string{
				`GPU-n1-1 (A100-80GB): in mig mode, not the one volcano.sh/vgpu-mode asks`,
				`container "c0": volcano.sh/vgpu-mode: hami-core: needs 2 GPUs in time-sliced (hami-core) mode, 1 on this node`,
			},
			wantShort: []string{`container "c0": volcano.sh/vgpu-mode: hami-core: fewer than 2 GPUs in time-sliced (hami-core) mode on this node`}},
		{name: "2 GPUs per container on MPS GPUs", node: pt.Node("n1").GPUs(2, "A100-80GB", mib).Mode(api.ModeMPS, 0, 1).Obj(),
			req: pt.Req().GPUs(2, 1024, 10).Obj(),
			want: []string{
				`GPU-n1-0 (A100-80GB): in mps mode, which serves one GPU per container; container "c0" asks 2`,
				`GPU-n1-1 (A100-80GB): in mps mode, which serves one GPU per container; container "c0" asks 2`,
				`container "c0": fewer than 2 GPUs outside mps mode (it serves one GPU per container) (2)`,
			},
			wantShort: []string{`container "c0": fewer than 2 GPUs outside mps mode (it serves one GPU per container)`}},
		{name: "podgroup spread, the only GPU holds a sibling", node: pt.Node("n1").GPUs(1, "A100-80GB", mib).Use(0, 1024, 10).Obj(),
			req:  pt.Req().GPUs(1, 1024, 10).SpreadGroup().Obj(),
			gang: &placement.GangView{Placed: map[string]placement.Siblings{"n1": {Tasks: 1, GPUs: []string{"GPU-n1-0"}}}, PlacedTasks: 1},
			want: []string{
				`GPU-n1-0 (A100-80GB): holds another pod of its PodGroup (volcano.sh/vgpu-podgroup-policy: spread)`,
				`container "c0": no GPU free of other pods of its PodGroup (volcano.sh/vgpu-podgroup-policy: spread) (1)`,
			},
			wantShort: []string{`container "c0": no GPU free of other pods of its PodGroup (volcano.sh/vgpu-podgroup-policy: spread)`}},
		{name: "use-gpuuuid names a GPU the node lacks", node: pt.Node("n1").GPUs(1, "A100-80GB", mib).Obj(),
			req: pt.Req().GPUs(1, 1024, 10).UUIDInclude("GPU-other").Obj(),
			want: []string{
				`GPU-n1-0 (A100-80GB): excluded by the UUID filter`,
				`container "c0": needs 1 GPU, 0 match the type/UUID filters (UUID in GPU-other)`,
			},
			wantShort: []string{`container "c0": needs 1 GPU matching the type/UUID filters (UUID in GPU-other), has fewer`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, reasons := placement.Fit(tt.req, tt.node, tt.gang)
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

func TestNormalizeRefusesAnUnknownMode(t *testing.T) {
	req := pt.Req().GPUs(1, 1024, 10).Mode("vcuda").Obj()
	err := req.Normalize(placement.Defaults{})
	if !errors.Is(err, placement.ErrUnknownMode) || !errors.Is(err, placement.ErrInvalidRequest) {
		t.Errorf("Normalize = %v, want ErrInvalidRequest and ErrUnknownMode", err)
	}
}

func TestNormalizeRefusesMPSWithSeveralGPUs(t *testing.T) {
	req := pt.Req().GPUs(2, 1024, 10).Mode(api.ModeMPS).Obj()
	err := req.Normalize(placement.Defaults{})
	want := `container "c0": volcano.sh/vgpu-mode: mps serves one GPU per container (an MPS client reaches one GPU's server), the container asks 2: ask for 1 GPU per container, or hami-core`
	if !errors.Is(err, placement.ErrInvalidRequest) || !strings.Contains(err.Error(), want) {
		t.Errorf("Normalize = %v, want ErrInvalidRequest with %q", err, want)
	}
}
