// Package simnode opens the simulated GPUs of one node of a
// simulated-cluster file for the device plugin: the NVML of package nvmlsim
// behind the plugin's device library, with Xid errors injected from a file.
// Both simulated device plugin binaries (one node per process, or many)
// open their nodes through it.
package simnode

import (
	"context"
	"fmt"
	"time"

	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/gpu"
	"github.com/volcano-vgpu/volcano-vgpu/e2e/sim/nvmlsim"
	"github.com/volcano-vgpu/volcano-vgpu/e2e/sim/simconfig"
)

// Xid says where a node's Xid injection lines come from.
type Xid struct {
	// File is followed for "<gpu> <xid>" lines (nvmlsim.InjectFile); ""
	// injects nothing.
	File string
	// Interval is how often File is read (default 500ms).
	Interval time.Duration
}

// Open builds the simulated NVML of node n, wraps it in the device plugin's
// device library and follows the Xid injection file until ctx ends. With
// migState, the GPUs' MIG instances are kept in that file across restarts
// (nvmlsim.PersistMIG). It returns the library and the node's tenant slots
// per GPU.
func Open(ctx context.Context, n simconfig.Node, xid Xid, migState string) (gpu.DeviceLib, int, error) {
	if len(n.GPUs) == 0 {
		return nil, 0, fmt.Errorf("simulated node %s has no GPUs: give its group gpus: 1 or more", n.Name)
	}
	sim := nvmlsim.New(n)
	if migState != "" {
		if err := sim.PersistMIG(migState); err != nil {
			return nil, 0, fmt.Errorf("simulated node %s: %w", n.Name, err)
		}
	}
	lib, err := gpu.New(sim)
	if err != nil {
		return nil, 0, fmt.Errorf("simulated node %s: %w", n.Name, err)
	}
	if xid.File != "" {
		go nvmlsim.InjectFile{Sim: sim, Path: xid.File, Interval: xid.Interval}.Run(ctx)
	}
	return lib, n.GPUs[0].MaxShares, nil
}
