package gpu_test

import (
	"errors"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/google/go-cmp/cmp"

	"github.com/volcano-vgpu/volcano-vgpu/api"
	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/gpu"
	"github.com/volcano-vgpu/volcano-vgpu/e2e/sim/nvmlsim"
	"github.com/volcano-vgpu/volcano-vgpu/e2e/sim/simconfig"
	"github.com/volcano-vgpu/volcano-vgpu/e2e/sim/simconfig/simtest"
)

func simNode(t testing.TB, name string) simconfig.Node {
	t.Helper()
	return simtest.LocalNode(t, name)
}

func open(t testing.TB, node simconfig.Node) gpu.DeviceLib {
	t.Helper()
	lib, err := gpu.New(nvmlsim.New(node))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(lib.Shutdown)
	return lib
}

func TestDevicesMatchSimConfig(t *testing.T) {
	node := simNode(t, "a100-80g-1")
	devs, err := open(t, node).Devices()
	if err != nil {
		t.Fatal(err)
	}
	var want []gpu.Device
	for _, g := range node.GPUs {
		want = append(want, gpu.Device{Index: g.Index, UUID: g.UUID, Model: g.Model, BusID: gpu.NormalizeBusID(g.BusID), MemoryMiB: g.MemoryMiB, NUMA: g.NUMA})
	}
	if d := cmp.Diff(want, devs); d != "" {
		t.Errorf("devices (-want +got):\n%s", d)
	}
}

func TestTopologyOfLocalNodes(t *testing.T) {
	const (
		I, S, N, X = api.PCIeInternal, api.PCIeSingle, api.PCIeNode, api.PCIeSystem
	)
	tests := []struct {
		name    string
		node    string
		nvlinks [][]int
		pcie    [][]api.PCIeLevel
	}{{
		name: "NVSwitch is all-to-all with 12 links", // 12 switch links on each side → min(12,12)
		node: "a100-80g-0",
		nvlinks: [][]int{
			{0, 12, 12, 12, 12, 12, 12, 12}, {12, 0, 12, 12, 12, 12, 12, 12},
			{12, 12, 0, 12, 12, 12, 12, 12}, {12, 12, 12, 0, 12, 12, 12, 12},
			{12, 12, 12, 12, 0, 12, 12, 12}, {12, 12, 12, 12, 12, 0, 12, 12},
			{12, 12, 12, 12, 12, 12, 0, 12}, {12, 12, 12, 12, 12, 12, 12, 0},
		},
		pcie: [][]api.PCIeLevel{
			{I, S, N, N, X, X, X, X}, {S, I, N, N, X, X, X, X}, {N, N, I, S, X, X, X, X}, {N, N, S, I, X, X, X, X},
			{X, X, X, X, I, S, N, N}, {X, X, X, X, S, I, N, N}, {X, X, X, X, N, N, I, S}, {X, X, X, X, N, N, S, I},
		},
	}, {
		name: "NVLink pairs (0,1)(2,3)(4,5)(6,7) with 4 links each",
		node: "a100-40g-1",
		nvlinks: [][]int{
			{0, 4, 0, 0, 0, 0, 0, 0}, {4, 0, 0, 0, 0, 0, 0, 0}, {0, 0, 0, 4, 0, 0, 0, 0}, {0, 0, 4, 0, 0, 0, 0, 0},
			{0, 0, 0, 0, 0, 4, 0, 0}, {0, 0, 0, 0, 4, 0, 0, 0}, {0, 0, 0, 0, 0, 0, 0, 4}, {0, 0, 0, 0, 0, 0, 4, 0},
		},
		pcie: [][]api.PCIeLevel{
			{I, S, N, N, X, X, X, X}, {S, I, N, N, X, X, X, X}, {N, N, I, S, X, X, X, X}, {N, N, S, I, X, X, X, X},
			{X, X, X, X, I, S, N, N}, {X, X, X, X, S, I, N, N}, {X, X, X, X, N, N, I, S}, {X, X, X, X, N, N, S, I},
		},
	}, {
		name:    "PCIe only, two NUMA nodes", // GPUs 0,1 on NUMA 0, 2,3 on NUMA 1 → across = system
		node:    "l4-0",
		nvlinks: [][]int{{0, 0, 0, 0}, {0, 0, 0, 0}, {0, 0, 0, 0}, {0, 0, 0, 0}},
		pcie:    [][]api.PCIeLevel{{I, S, X, X}, {S, I, X, X}, {X, X, I, S}, {X, X, S, I}},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			lib := open(t, simNode(t, tc.node))
			devs, err := lib.Devices()
			if err != nil {
				t.Fatal(err)
			}
			top, err := lib.Topology(devs)
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tc.nvlinks, top.NVLinks); d != "" {
				t.Errorf("NVLinks (-want +got):\n%s", d)
			}
			if d := cmp.Diff(tc.pcie, top.PCIe); d != "" {
				t.Errorf("PCIe (-want +got):\n%s", d)
			}
			// The matrices are what the inventory publishes: they must pass api's checks.
			inv := api.Inventory{Heartbeat: testTime, NVLinks: top.NVLinks, PCIe: top.PCIe}
			for _, d := range devs {
				inv.GPUs = append(inv.GPUs, api.GPU{Index: d.Index, UUID: d.UUID, Model: d.Model, MemoryMiB: d.MemoryMiB, NUMA: d.NUMA, Healthy: true, MaxShares: 10})
			}
			if _, err := api.EncodeInventory(inv); err != nil {
				t.Errorf("inventory from topology does not encode: %v", err)
			}
		})
	}
}

func TestNVMLNotFound(t *testing.T) {
	lib := &mock.Interface{InitFunc: func() nvml.Return { return nvml.ERROR_LIBRARY_NOT_FOUND }}
	_, err := gpu.New(lib)
	if !errors.Is(err, gpu.ErrNVMLNotFound) {
		t.Fatalf("err = %v, want ErrNVMLNotFound", err)
	}
	for _, want := range []string{"NVML not found", "install the NVIDIA driver"} {
		if !contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
}

func TestEventsCarryUUIDAndXID(t *testing.T) {
	node := simNode(t, "l4-1")
	sim := nvmlsim.New(node)
	lib, err := gpu.New(sim)
	if err != nil {
		t.Fatal(err)
	}
	devs, _ := lib.Devices()
	ev, err := lib.Events(devs)
	if err != nil {
		t.Fatal(err)
	}
	defer ev.Close()
	if _, err := ev.Wait(1); !errors.Is(err, gpu.ErrTimeout) {
		t.Fatalf("Wait with nothing injected: err = %v, want ErrTimeout", err)
	}
	if err := sim.InjectXID(node.GPUs[2].UUID, 79); err != nil {
		t.Fatal(err)
	}
	got, err := ev.Wait(1000)
	if err != nil {
		t.Fatal(err)
	}
	if want := (gpu.Event{UUID: node.GPUs[2].UUID, XID: 79}); got != want {
		t.Errorf("event = %+v, want %+v", got, want)
	}
	if err := sim.InjectXID("GPU-nope", 79); err == nil {
		t.Error("injecting on an unknown GPU succeeded")
	}
}

func TestNormalizeBusID(t *testing.T) {
	for in, want := range map[string]string{
		"00000000:1A:00.0":  "0000:1a:00.0",
		"0000:1a:00.0":      "0000:1a:00.0",
		" 00000001:C0:00.0": "0001:c0:00.0",
	} {
		if got := gpu.NormalizeBusID(in); got != want {
			t.Errorf("NormalizeBusID(%q) = %q, want %q", in, got, want)
		}
	}
}

// What the driver reserves of a GPU (NVML memory v2) is never offered:
// tenants' caps must fit what the card really has.
func TestDevicesLeaveTheDriversReservedMemory(t *testing.T) {
	tests := []struct {
		name         string
		reservedMiB  int64
		noV2         bool // a driver without nvmlDeviceGetMemoryInfo_v2
		wantMemory   int64
		wantReserved int64
	}{
		{name: "H100-like reserve", reservedMiB: 542, wantMemory: 81920 - 542, wantReserved: 542}, // 81920 - 542 = 81378 offered
		{name: "nothing reserved", wantMemory: 81920},
		{name: "older driver: total offered", reservedMiB: 542, noV2: true, wantMemory: 81920},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			node := simNode(t, "a100-80g-1")
			for i := range node.GPUs {
				node.GPUs[i].MemoryMiB, node.GPUs[i].ReservedMiB = 81920, tt.reservedMiB
			}
			sim := nvmlsim.New(node)
			if tt.noV2 {
				for i := range node.GPUs {
					d, _ := sim.DeviceGetHandleByIndex(i)
					d.(*mock.Device).GetMemoryInfo_v2Func = func() (nvml.Memory_v2, nvml.Return) { return nvml.Memory_v2{}, nvml.ERROR_NOT_SUPPORTED }
				}
			}
			lib, err := gpu.New(sim)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(lib.Shutdown)
			devs, err := lib.Devices()
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range devs {
				if d.MemoryMiB != tt.wantMemory || d.ReservedMiB != tt.wantReserved {
					t.Errorf("%s: memory %d MiB, reserved %d MiB; want %d and %d", d.UUID, d.MemoryMiB, d.ReservedMiB, tt.wantMemory, tt.wantReserved)
				}
			}
		})
	}
}
