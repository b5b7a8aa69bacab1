package plugin

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/google/go-cmp/cmp"

	"github.com/volcano-vgpu/volcano-vgpu/api"
	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/config"
	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/gpu"
	"github.com/volcano-vgpu/volcano-vgpu/e2e/sim/nvmlsim"
)

func TestMIGState(t *testing.T) {
	d := gpu.Device{Index: 2, UUID: "GPU-c", Model: "NVIDIA A100-SXM4-40GB"}
	profiles := []api.MIGProfile{
		{Name: "1g.5gb", Slices: 1, MemoryMiB: 4864, Instances: 7, Placements: []api.MIGPlacement{{Start: 0, Size: 1}, {Start: 1, Size: 1}}},
		{Name: "3g.20gb", Slices: 3, MemoryMiB: 19968, Instances: 2, Placements: []api.MIGPlacement{{Start: 0, Size: 4}, {Start: 4, Size: 4}}},
	}
	on := gpu.MIG{Capable: true, Enabled: true, Pending: true, MemorySlices: 8, Profiles: profiles}
	with := func(ins ...api.MIGInstance) gpu.MIG { m := on; m.Instances = ins; return m }
	g3 := api.MIGInstance{Profile: "3g.20gb", Placement: api.MIGPlacement{Start: 4, Size: 4}, UUID: "MIG-a"}
	g1 := api.MIGInstance{Profile: "1g.5gb", Placement: api.MIGPlacement{Start: 0, Size: 1}, UUID: "MIG-b"}
	tests := []struct {
		name     string
		mode     api.GPUMode
		geometry config.Geometry
		mig      gpu.MIG
		want     *api.MIG
		wantErr  string
	}{
		{name: "time-sliced GPU without MIG", mode: api.ModeTimeSliced, mig: gpu.MIG{Capable: true}},
		{name: "time-sliced GPU with no MIG mode at all", mode: api.ModeTimeSliced},
		{name: "on-demand: profiles and existing instances published", mode: api.ModeMIG, mig: with(g3),
			want: &api.MIG{Geometry: api.MIGOnDemand, MemorySlices: 8, Profiles: profiles, Instances: []api.MIGInstance{g3}}},
		{name: "fixed geometry held, in any order", mode: api.ModeMIG, geometry: config.Geometry{"1g.5gb", "3g.20gb"}, mig: with(g3, g1),
			want: &api.MIG{Geometry: api.MIGFixed, MemorySlices: 8, Profiles: profiles, Instances: []api.MIGInstance{g3, g1}}},
		{name: "MIG mode off", mode: api.ModeMIG, mig: gpu.MIG{Capable: true},
			wantErr: "sharing gives GPU GPU-c (index 2, NVIDIA A100-SXM4-40GB) mode mig, but its MIG mode is off: turn it on with nvidia-smi -i 2 -mig 1"},
		{name: "MIG mode waiting for a reset", mode: api.ModeMIG, mig: gpu.MIG{Capable: true, Pending: true},
			wantErr: "its MIG mode is on from its next reset: reset the GPU (nvidia-smi -i 2 -r) or reboot the node"},
		{name: "no MIG mode on the model", mode: api.ModeMIG,
			wantErr: "sharing gives GPU GPU-c (index 2, NVIDIA A100-SXM4-40GB) mode mig, but it has no MIG mode"},
		{name: "MIG on under whole-GPU sharing", mode: api.ModeMPS, mig: on,
			wantErr: "has MIG mode on, and sharing gives it mode mps, which shares the whole GPU: give it mode mig (sharing.gpus[\"GPU-c\"]: mig) or turn MIG off (nvidia-smi -i 2 -mig 0)"},
		{name: "geometry names a profile the GPU lacks", mode: api.ModeMIG, geometry: config.Geometry{"2g.10gb"}, mig: on,
			wantErr: "names profile 2g.10gb, which the GPU does not have: use its profiles, 1g.5gb, 3g.20gb"},
		{name: "geometry not created", mode: api.ModeMIG, geometry: config.Geometry{"3g.20gb", "3g.20gb"}, mig: with(g3),
			wantErr: "is [3g.20gb, 3g.20gb] and the GPU holds [3g.20gb]: make them agree (nvidia-smi mig -i 2 -dci; nvidia-smi mig -i 2 -dgi; nvidia-smi mig -i 2 -cgi 3g.20gb,3g.20gb -C)"},
		{name: "fixed instance without a compute instance", mode: api.ModeMIG, geometry: config.Geometry{"3g.20gb"},
			mig:     with(api.MIGInstance{Profile: "3g.20gb", Placement: api.MIGPlacement{Start: 0, Size: 4}}),
			wantErr: "the 3g.20gb instance at memory slices 0+4 has no compute instance: create it (nvidia-smi mig -i 2 -cci)"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := migState(d, tc.mode, tc.geometry, tc.mig)
			if tc.wantErr != "" {
				if !errors.Is(err, ErrMIGConfig) || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error = %v, want ErrMIGConfig containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("MIG state (-want +got):\n%s", diff)
			}
		})
	}
}

// migEnv: the test node with GPU 2 in MIG mode and given mode mig, a
// 3g.20gb instance on its second half.
func migEnv(t *testing.T, edit func(*config.Config)) (*testEnv, string) {
	t.Helper()
	node := simNode(t, testNode)
	node.GPUs[2].MIG = true
	sim := nvmlsim.New(node)
	h, _ := sim.DeviceGetHandleByIndex(2)
	info, _ := h.GetGpuInstanceProfileInfo(nvml.GPU_INSTANCE_PROFILE_3_SLICE)
	gi, ret := h.CreateGpuInstanceWithPlacement(&info, &nvml.GpuInstancePlacement{Start: 4, Size: 4})
	if ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	ci, _ := gi.GetComputeInstanceProfileInfo(nvml.COMPUTE_INSTANCE_PROFILE_3_SLICE, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
	if _, ret := gi.CreateComputeInstance(&ci); ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	mig, _ := h.GetMigDeviceHandleByIndex(0)
	migUUID, _ := mig.GetUUID()
	toolkit := t.TempDir() // the toolkit's spec directory, empty unless a test writes one
	return newEnvSim(t, t.TempDir(), sim, func(c *config.Config) {
		c.Sharing.GPUs = map[string]api.GPUMode{node.GPUs[2].UUID: api.ModeMIG}
		c.CDI.ToolkitSpecDirs = []string{toolkit}
		if edit != nil {
			edit(c)
		}
	}), migUUID
}

func TestInventoryPublishesMIG(t *testing.T) {
	e, migUUID := migEnv(t, nil)
	inv := e.p.Inventory()
	for i, g := range inv.GPUs {
		if i != 2 {
			if g.Mode != api.ModeTimeSliced || g.MIG != nil {
				t.Errorf("GPU %d: mode %s, MIG %+v; want time-sliced without MIG", i, g.Mode, g.MIG)
			}
			continue
		}
		if g.Mode != api.ModeMIG || g.MIG == nil || !g.Healthy {
			t.Fatalf("GPU 2: mode %s, MIG %+v, healthy %t; want a healthy mig GPU", g.Mode, g.MIG, g.Healthy)
		}
		if g.MIG.Geometry != api.MIGOnDemand || g.MIG.MemorySlices != 8 || len(g.MIG.Profiles) != 7 {
			t.Errorf("GPU 2: %s, %d memory slices, %d profiles; want on-demand, 8, the A100-40GB's 7", g.MIG.Geometry, g.MIG.MemorySlices, len(g.MIG.Profiles))
		}
		want := []api.MIGInstance{{Profile: "3g.20gb", Placement: api.MIGPlacement{Start: 4, Size: 4}, UUID: migUUID}}
		if d := cmp.Diff(want, g.MIG.Instances); d != "" {
			t.Errorf("instances (-want +got):\n%s", d)
		}
	}
	inv.Heartbeat = t0
	if _, err := api.EncodeInventory(inv); err != nil {
		t.Errorf("the inventory does not encode: %v", err)
	}
	// what one reader does to its copy stays there
	inv.GPUs[2].MIG.Instances[0].InUse = true
	if e.p.Inventory().GPUs[2].MIG.Instances[0].InUse {
		t.Error("Inventory hands out the plugin's own MIG state")
	}
}

func TestFixedGeometryPublished(t *testing.T) {
	e, _ := migEnv(t, func(c *config.Config) {
		c.MIG.Models = map[string]config.Geometry{"A100": {"3g.20gb"}}
	})
	if g := e.p.Inventory().GPUs[2].MIG.Geometry; g != api.MIGFixed {
		t.Errorf("geometry = %s, want fixed", g)
	}
}

func TestNewRefusesMIGModeOff(t *testing.T) {
	node := simNode(t, testNode)
	lib, err := gpu.New(nvmlsim.New(node))
	if err != nil {
		t.Fatal(err)
	}
	cfg := config.Default()
	cfg.StateDir = t.TempDir()
	cfg.Sharing.GPUs = map[string]api.GPUMode{node.GPUs[3].UUID: api.ModeMIG}
	_, err = New(context.Background(), Options{Node: testNode, Lib: lib, Config: cfg, Limiter: jsonLimiter})
	if !errors.Is(err, ErrMIGConfig) || !strings.Contains(err.Error(), node.GPUs[3].UUID) || !strings.Contains(err.Error(), "nvidia-smi -i 3 -mig 1") {
		t.Errorf("New = %v, want ErrMIGConfig naming GPU 3 and nvidia-smi -i 3 -mig 1", err)
	}
}
