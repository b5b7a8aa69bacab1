package vgpu

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	schedulingv1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"
	"volcano.sh/volcano/pkg/scheduler/uthelper"

	"github.com/volcano-vgpu/volcano-vgpu/api"
	"github.com/volcano-vgpu/volcano-vgpu/plugins/placement/placementtest"
)

// mig puts GPU i in mode mig with an A100 40GB's on-demand geometry.
func (g *gpuNode) mig(i int) *gpuNode {
	m := placementtest.MIGA100x40()
	g.inv.GPUs[i].Mode = api.ModeMIG
	g.inv.GPUs[i].MIG = &api.MIG{Geometry: api.MIGOnDemand, MemorySlices: m.MemorySlices, Profiles: m.Profiles}
	return g
}

// A node with one MIG A100 and one shared A100: Volcano's MIG example
// (vgpu-mode: mig) gets an instance of the MIG GPU, named in its
// assignment; a fractional pod gets a share of the other GPU.
func TestSessionMIGBesideFractions(t *testing.T) {
	tests := []struct {
		name    string
		anno    map[string]string
		memMiB  int64
		wantGPU string
		wantMIG *api.MIGDevice
	}{
		{name: "vgpu-mode mig: the smallest instance that holds 4 GiB", anno: map[string]string{api.VolcanoModeKey: "mig"}, memMiB: 4096,
			wantGPU: "GPU-mixed-0", wantMIG: &api.MIGDevice{Profile: "1g.5gb", Placement: api.MIGPlacement{Start: 6, Size: 1}}},
		{name: "mig-profile names the instance", anno: map[string]string{api.MIGProfileKey: "3g.20gb"}, memMiB: 1024,
			wantGPU: "GPU-mixed-0", wantMIG: &api.MIGDevice{Profile: "3g.20gb", Placement: api.MIGPlacement{Start: 4, Size: 4}}},
		{name: "no mode: a share of the shared GPU", memMiB: 4096, wantGPU: "GPU-mixed-1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := newPod("ns", "p").group("pg").gpus(1, tc.memMiB, 0)
			for k, v := range tc.anno {
				b.annotate(k, v)
			}
			runSession(t, sessionCase{
				TestCommonStruct: uthelper.TestCommonStruct{
					Name:  tc.name,
					Nodes: []*corev1.Node{newGPUNode("mixed", "NVIDIA A100-SXM4-40GB", 2, 40960).mig(0).obj(t)},
					Pods:  []*corev1.Pod{b.obj()}, PodGroups: []*schedulingv1beta1.PodGroup{podGroup("pg", 1)},
					ExpectBindMap: map[string]string{"ns/p": "mixed"}, ExpectBindsNum: 1,
				},
				check: func(t *testing.T, r *sessionRun) {
					a := assignments(t, r, "ns")["p"]
					if len(a.Containers) != 1 || len(a.Containers[0].Devices) != 1 {
						t.Fatalf("assignment %+v, want one device", a)
					}
					d := a.Containers[0].Devices[0]
					if d.UUID != tc.wantGPU {
						t.Errorf("assigned %s, want %s", d.UUID, tc.wantGPU)
					}
					switch {
					case tc.wantMIG == nil && d.MIG != nil:
						t.Errorf("a share got MIG instance %+v", d.MIG)
					case tc.wantMIG != nil && (d.MIG == nil || *d.MIG != *tc.wantMIG):
						t.Errorf("MIG instance %+v, want %+v", d.MIG, tc.wantMIG)
					}
				},
			})
		})
	}
}

func TestSessionMIGProfileSmallerThanAsk(t *testing.T) {
	// 1g.10gb has 9856 MiB on an A100-40GB; the pod asks 12000 MiB: refused
	// with the profile, its memory, the ask and the fix, never capped.
	p := newPod("ns", "p").group("pg").gpus(1, 12000, 0).annotate(api.MIGProfileKey, "1g.10gb").obj()
	runSession(t, sessionCase{
		TestCommonStruct: uthelper.TestCommonStruct{
			Name:  "a named MIG profile smaller than the ask",
			Nodes: []*corev1.Node{newGPUNode("mixed", "NVIDIA A100-SXM4-40GB", 2, 40960).mig(0).obj(t)},
			Pods:  []*corev1.Pod{p}, PodGroups: []*schedulingv1beta1.PodGroup{podGroup("pg", 1)},
			ExpectBindMap: map[string]string{}, ExpectBindsNum: 0,
		},
		check: func(t *testing.T, r *sessionRun) {
			if _, ok := assignments(t, r, "ns")["p"]; ok {
				t.Fatal("the pod was assigned an instance smaller than its ask")
			}
			want := "the 1g.10gb MIG profile has 9856 MiB, container \"main\" asks 12000 MiB: name a larger profile (volcano-vgpu.io/mig-profile) or ask at most 9856 MiB"
			if msg := fitError(t, r.ssn, p); !strings.Contains(msg, want) {
				t.Errorf("fit error = %q, want it to contain %q", msg, want)
			}
		},
	})
}
