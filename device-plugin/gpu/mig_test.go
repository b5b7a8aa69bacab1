package gpu_test

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/google/go-cmp/cmp"

	"github.com/volcano-vgpu/volcano-vgpu/api"
	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/gpu"
	"github.com/volcano-vgpu/volcano-vgpu/e2e/sim/migtable"
	"github.com/volcano-vgpu/volcano-vgpu/e2e/sim/nvmlsim"
	"github.com/volcano-vgpu/volcano-vgpu/e2e/sim/simconfig"
)

// migSim is a node of two GPUs of model, GPU 0 in MIG mode.
func migSim(t *testing.T, model string, memMiB int64) (*nvmlsim.Sim, gpu.DeviceLib) {
	t.Helper()
	f, err := simconfig.Parse(fmt.Appendf(nil, `version: v1
nodes:
- {namePrefix: m, count: 1, cpu: "8", memory: 8Gi, pods: 10, gpuModel: %q, gpus: 2, gpuMemoryMiB: %d, topology: pcie, maxShares: 4, migGPUs: [0]}`, model, memMiB))
	if err != nil {
		t.Fatal(err)
	}
	sim := nvmlsim.New(f.Nodes()[0])
	lib, err := gpu.New(sim)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(lib.Shutdown)
	return sim, lib
}

// Discovery names every profile as nvidia-smi does and reads NVML's
// placements: the result is the published table, for each model.
func TestMIGDiscoversThePublishedProfiles(t *testing.T) {
	for _, tc := range []struct {
		model  string
		memMiB int64
	}{
		{"NVIDIA A100-SXM4-40GB", 40960},
		{"NVIDIA A100-PCIE-40GB", 40960},
		{"NVIDIA A100-SXM4-80GB", 81920},
		{"NVIDIA H100 80GB HBM3", 81559}, // what NVML reports on an H100 SXM5
	} {
		t.Run(tc.model, func(t *testing.T) {
			sim, lib := migSim(t, tc.model, tc.memMiB)
			m, err := lib.MIG(sim.Node().GPUs[0].UUID)
			if err != nil {
				t.Fatal(err)
			}
			tab, _ := migtable.ForModel(tc.model)
			want := gpu.MIG{Capable: true, Enabled: true, Pending: true, MemorySlices: tab.MemorySlices}
			for _, p := range tab.Profiles {
				ap := api.MIGProfile{Name: p.Name, Slices: p.Slices, MemoryMiB: p.MemoryMiB, Instances: p.Instances}
				for _, pl := range p.Placements {
					ap.Placements = append(ap.Placements, api.MIGPlacement{Start: pl.Start, Size: pl.Size})
				}
				want.Profiles = append(want.Profiles, ap)
			}
			// NVML lists profiles by constant: 1g, 2g, 3g, 4g, 7g, then 1g+me, then the doubled 1g
			sortByConstant(t, tab, want.Profiles)
			if d := cmp.Diff(want, m); d != "" {
				t.Errorf("MIG (-want +got):\n%s", d)
			}
		})
	}
}

func sortByConstant(t *testing.T, tab migtable.Table, ps []api.MIGProfile) {
	t.Helper()
	c := func(name string) int {
		p, ok := tab.Profile(name)
		if !ok {
			t.Fatalf("no profile %s", name)
		}
		return p.NVML
	}
	slices.SortFunc(ps, func(a, b api.MIGProfile) int { return c(a.Name) - c(b.Name) })
}

func TestMIGModes(t *testing.T) {
	sim, lib := migSim(t, "NVIDIA A100-SXM4-40GB", 40960)
	off, err := lib.MIG(sim.Node().GPUs[1].UUID)
	if err != nil || !cmp.Equal(off, gpu.MIG{Capable: true}) {
		t.Errorf("GPU with MIG off: %+v, %v; want capable, not enabled", off, err)
	}
	l4 := open(t, simNode(t, "l4-0"))
	devs, _ := l4.Devices()
	if m, err := l4.MIG(devs[0].UUID); err != nil || m.Capable {
		t.Errorf("L4: %+v, %v; want not capable", m, err)
	}
	if _, err := lib.MIG("GPU-none"); !errors.Is(err, gpu.ErrMIG) {
		t.Errorf("unknown GPU: %v, want ErrMIG", err)
	}
}

func TestMIGInstances(t *testing.T) {
	sim, lib := migSim(t, "NVIDIA A100-SXM4-40GB", 40960)
	uuid := sim.Node().GPUs[0].UUID
	h, _ := sim.DeviceGetHandleByUUID(uuid)
	// create makes a GPU instance at start+size and, withCI, its compute
	// instance; it returns the MIG device's UUID.
	create := func(profile int, start, size uint32, withCI bool) string {
		info, _ := h.GetGpuInstanceProfileInfo(profile)
		gi, ret := h.CreateGpuInstanceWithPlacement(&info, &nvml.GpuInstancePlacement{Start: start, Size: size})
		if ret != nvml.SUCCESS {
			t.Fatal(ret)
		}
		if !withCI {
			return ""
		}
		gii, _ := gi.GetInfo()
		ciInfo, _ := gi.GetComputeInstanceProfileInfo(map[uint32]int{1: nvml.COMPUTE_INSTANCE_PROFILE_1_SLICE, 3: nvml.COMPUTE_INSTANCE_PROFILE_3_SLICE}[info.SliceCount], nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
		if _, ret := gi.CreateComputeInstance(&ciInfo); ret != nvml.SUCCESS {
			t.Fatal(ret)
		}
		for i := 0; i < 7; i++ {
			d, ret := h.GetMigDeviceHandleByIndex(i)
			if ret != nvml.SUCCESS {
				continue
			}
			if id, _ := d.GetGpuInstanceId(); id == int(gii.Id) {
				u, _ := d.GetUUID()
				return u
			}
		}
		t.Fatal("no MIG device for the new instance")
		return ""
	}
	busy := create(nvml.GPU_INSTANCE_PROFILE_3_SLICE, 4, 4, true)
	idle := create(nvml.GPU_INSTANCE_PROFILE_1_SLICE, 1, 1, true)
	create(nvml.GPU_INSTANCE_PROFILE_1_SLICE, 0, 1, false) // no compute instance yet: no MIG device
	if err := sim.RunOnMIG(busy, 100); err != nil {
		t.Fatal(err)
	}
	m, err := lib.MIG(uuid)
	if err != nil {
		t.Fatal(err)
	}
	want := []api.MIGInstance{
		{Profile: "1g.5gb", Placement: api.MIGPlacement{Start: 0, Size: 1}},
		{Profile: "1g.5gb", Placement: api.MIGPlacement{Start: 1, Size: 1}, UUID: idle},
		{Profile: "3g.20gb", Placement: api.MIGPlacement{Start: 4, Size: 4}, UUID: busy, InUse: true},
	}
	if d := cmp.Diff(want, m.Instances); d != "" {
		t.Errorf("instances (-want +got):\n%s", d)
	}
}
