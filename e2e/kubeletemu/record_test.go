package kubeletemu

import (
	"slices"
	"testing"
)

func TestAllocateResponseGPUs(t *testing.T) {
	const mig = "MIG-11111111-2222-3333-4444-555555555555"
	for _, tc := range []struct {
		name string
		r    AllocateResponse
		want []string
	}{
		{name: "CDI: the toolkit's names", r: AllocateResponse{CDIDevices: []string{"nvidia.com/gpu=GPU-a", "volcano-vgpu.io/limiter=uid_main"},
			Envs: map[string]string{"NVIDIA_VISIBLE_DEVICES": "void"}}, want: []string{"GPU-a"}},
		{name: "CDI: the plugin's MIG device by its MIG UUID", r: AllocateResponse{CDIDevices: []string{"volcano-vgpu.io/mig=uid_main_" + mig, "volcano-vgpu.io/limiter=uid_main"},
			Envs: map[string]string{"NVIDIA_VISIBLE_DEVICES": "void"}}, want: []string{mig}},
		{name: "env mode", r: AllocateResponse{Envs: map[string]string{"NVIDIA_VISIBLE_DEVICES": "GPU-a,GPU-b"}}, want: []string{"GPU-a", "GPU-b"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.r.GPUs(); !slices.Equal(got, tc.want) {
				t.Errorf("GPUs() = %v, want %v", got, tc.want)
			}
		})
	}
}
