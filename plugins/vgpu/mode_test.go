package vgpu

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	schedulingv1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"
	"volcano.sh/volcano/pkg/scheduler/uthelper"

	"github.com/volcano-vgpu/volcano-vgpu/api"
)

func TestNodeFromInventoryModes(t *testing.T) {
	node := newGPUNode("n1", "H100", 3, 81920).mode(api.ModeMPS, 0).mode(api.ModeTimeSliced, 1).obj(t)
	n, _, err := nodeFromInventory(node)
	if err != nil {
		t.Fatal(err)
	}
	// GPU 2 publishes no mode (an older plugin): time-sliced.
	want := []api.GPUMode{api.ModeMPS, api.ModeTimeSliced, api.ModeTimeSliced}
	for i, g := range n.GPUs {
		if g.Mode != want[i] {
			t.Errorf("GPU %d mode = %q, want %q", i, g.Mode, want[i])
		}
	}
}

// A node with one MPS GPU and one time-sliced GPU: each pod lands on the GPU
// of the mode it asks for; a pod asking none takes either.
func TestSessionModeLandsOnItsGPU(t *testing.T) {
	tests := []struct {
		name    string
		anno    map[string]string
		cores   int64
		wantGPU string // "" = either GPU
	}{
		{name: "vgpu-mode mps lands on the MPS GPU", anno: map[string]string{api.VolcanoModeKey: "mps"}, cores: 30, wantGPU: "GPU-mixed-0"},
		{name: "vgpu-mode hami-core lands on the time-sliced GPU", anno: map[string]string{api.VolcanoModeKey: "hami-core"}, cores: 30, wantGPU: "GPU-mixed-1"},
		{name: "no mode: either GPU", cores: 30},
		{name: "whole GPU, no mode: either GPU", cores: 100},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := newPod("ns", "p").group("pg").gpus(1, 4096, tc.cores)
			for k, v := range tc.anno {
				b.annotate(k, v)
			}
			runSession(t, sessionCase{
				TestCommonStruct: uthelper.TestCommonStruct{
					Name:  tc.name,
					Nodes: []*corev1.Node{newGPUNode("mixed", "NVIDIA H100 80GB HBM3", 2, 81920).mode(api.ModeMPS, 0).mode(api.ModeTimeSliced, 1).obj(t)},
					Pods:  []*corev1.Pod{b.obj()}, PodGroups: []*schedulingv1beta1.PodGroup{podGroup("pg", 1)},
					ExpectBindMap: map[string]string{"ns/p": "mixed"}, ExpectBindsNum: 1,
				},
				check: func(t *testing.T, r *sessionRun) {
					got := uuids(assignments(t, r, "ns")["p"])
					if len(got) != 1 || tc.wantGPU != "" && got[0] != tc.wantGPU {
						t.Errorf("assigned %v, want one GPU %q", got, tc.wantGPU)
					}
				},
			})
		})
	}
}
