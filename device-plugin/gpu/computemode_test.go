package gpu_test

import (
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/gpu"
	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/mps"
	"github.com/volcano-vgpu/volcano-vgpu/e2e/sim/nvmlsim"
)

func TestSetExclusive(t *testing.T) {
	node := simNode(t, "l4-0")
	sim := nvmlsim.New(node)
	lib, err := gpu.New(sim)
	if err != nil {
		t.Fatal(err)
	}
	modes, ok := lib.(mps.ComputeModes)
	if !ok {
		t.Fatal("the NVML library cannot set compute modes")
	}
	u0, u1 := node.GPUs[0].UUID, node.GPUs[1].UUID
	steps := []struct {
		name      string
		uuid      string
		exclusive bool
		want0     nvml.ComputeMode
		wantErr   string
	}{
		{name: "exclusive", uuid: u0, exclusive: true, want0: nvml.COMPUTEMODE_EXCLUSIVE_PROCESS},
		{name: "exclusive again is a no-op", uuid: u0, exclusive: true, want0: nvml.COMPUTEMODE_EXCLUSIVE_PROCESS},
		{name: "another GPU is left alone", uuid: u1, exclusive: false, want0: nvml.COMPUTEMODE_EXCLUSIVE_PROCESS},
		{name: "back to default", uuid: u0, exclusive: false, want0: nvml.COMPUTEMODE_DEFAULT},
		{name: "a lost GPU", uuid: "lost", wantErr: "GPU lost: handle"},
	}
	for _, s := range steps {
		err := modes.SetExclusive(s.uuid, s.exclusive)
		if s.wantErr != "" {
			if err == nil || !contains(err.Error(), s.wantErr) {
				t.Errorf("%s: error %v, want %q", s.name, err, s.wantErr)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		if got := sim.ComputeMode(u0); got != s.want0 {
			t.Errorf("%s: GPU 0 compute mode %v, want %v", s.name, got, s.want0)
		}
	}
}
