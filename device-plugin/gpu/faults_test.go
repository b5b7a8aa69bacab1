package gpu_test

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/volcano-vgpu/volcano-vgpu/api"
	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/gpu"
	"github.com/volcano-vgpu/volcano-vgpu/e2e/sim/nvmlsim"
)

// One GPU that fell off the bus before discovery: the others are
// discovered in full, it is listed with its failure, its links are none.
func TestDiscoveryWithOneLostGPU(t *testing.T) {
	node := simNode(t, "l4-0")
	sim := nvmlsim.New(node)
	if err := sim.FallOffBus(node.GPUs[2].UUID); err != nil {
		t.Fatal(err)
	}
	lib, err := gpu.New(sim)
	if err != nil {
		t.Fatal(err)
	}
	devs, err := lib.Devices()
	if err != nil {
		t.Fatalf("one lost GPU failed the discovery of all: %v", err)
	}
	var want []gpu.Device
	for _, g := range node.GPUs {
		want = append(want, gpu.Device{Index: g.Index, UUID: g.UUID, Model: g.Model, BusID: gpu.NormalizeBusID(g.BusID), MemoryMiB: g.MemoryMiB, NUMA: g.NUMA})
	}
	want[2] = gpu.Device{Index: 2, NUMA: -1, Failure: "handle: ERROR_GPU_IS_LOST"}
	if d := cmp.Diff(want, devs); d != "" {
		t.Errorf("devices (-want +got):\n%s", d)
	}
	top, err := lib.Topology(devs)
	if err != nil {
		t.Fatalf("topology with a lost GPU: %v", err)
	}
	const I, S, X = api.PCIeInternal, api.PCIeSingle, api.PCIeSystem
	// GPU 2 (lost) is at the farthest level from every other GPU; 0,1 share a switch
	if d := cmp.Diff([][]api.PCIeLevel{{I, S, X, X}, {S, I, X, X}, {X, X, I, X}, {X, X, X, I}}, top.PCIe); d != "" {
		t.Errorf("PCIe (-want +got):\n%s", d)
	}
	ev, err := lib.Events(devs)
	if err != nil {
		t.Fatalf("events with a lost GPU: %v", err)
	}
	ev.Close()
}

func TestProbe(t *testing.T) {
	tests := []struct {
		name    string
		fault   func(sim *nvmlsim.Sim, uuid string) error
		wantErr error  // nil: the probe passes
		says    string // what the error tells the operator
	}{
		{name: "a GPU that answers passes"},
		{name: "fallen off the bus: lost", fault: (*nvmlsim.Sim).FallOffBus, wantErr: gpu.ErrGPULost, says: "reset the GPU or reboot the node"},
		{name: "row remapping pending: needs a reset", fault: (*nvmlsim.Sim).SetRemapPending, wantErr: gpu.ErrProbe, says: "nvidia-smi -r"},
		{name: "lost then reset: passes", fault: func(sim *nvmlsim.Sim, uuid string) error {
			if err := sim.FallOffBus(uuid); err != nil {
				return err
			}
			return sim.Reset(uuid)
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			node := simNode(t, "l4-0")
			sim := nvmlsim.New(node)
			lib, err := gpu.New(sim)
			if err != nil {
				t.Fatal(err)
			}
			uuid := node.GPUs[1].UUID
			if tc.fault != nil {
				if err := tc.fault(sim, uuid); err != nil {
					t.Fatal(err)
				}
			}
			err = lib.Probe(uuid)
			if tc.wantErr == nil {
				if err != nil {
					t.Fatalf("probe: %v", err)
				}
				return
			}
			if !errors.Is(err, tc.wantErr) || !errors.Is(err, gpu.ErrProbe) || !contains(err.Error(), tc.says) || !contains(err.Error(), uuid) {
				t.Errorf("probe error %v: want %v naming %s and saying %q", err, tc.wantErr, uuid, tc.says)
			}
			if err := lib.Probe(node.GPUs[0].UUID); err != nil {
				t.Errorf("the other GPU: %v", err)
			}
		})
	}
}
