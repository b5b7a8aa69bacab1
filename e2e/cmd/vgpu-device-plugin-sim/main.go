// Command vgpu-device-plugin-sim is the device plugin of a simulated node of
// the local cluster: the shipped device plugin (package device-plugin/app,
// same flags, same configuration) on a simulated NVML built from the node
// named --node-name in a simulated-cluster file (e2e/sim/clusters/*.yaml).
// No GPU or driver is needed. Lines appended to --inject-xid-file inject Xid
// errors into the simulated NVML's event set.
package main

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"

	"github.com/spf13/pflag"
	"k8s.io/klog/v2"

	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/app"
	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/config"
	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/gpu"
	"github.com/volcano-vgpu/volcano-vgpu/e2e/sim/nvmlsim"
	"github.com/volcano-vgpu/volcano-vgpu/e2e/sim/simconfig"
)

// errNoSimFile is returned when --sim-file is not given.
var errNoSimFile = errors.New("--sim-file is required")

// errNoSimNode is returned when the simulated-cluster file has no node of
// the plugin's name.
var errNoSimNode = errors.New("node not in the simulated-cluster file")

func main() {
	var s simFlags
	app.Main("vgpu-device-plugin-sim", s.bind, s.open)
}

// simFlags are the flags this binary adds to the device plugin's.
type simFlags struct {
	file, xidFile string
}

func (s *simFlags) bind(fs *pflag.FlagSet) {
	fs.StringVar(&s.file, "sim-file", "", "simulated-cluster file (e2e/sim/clusters/*.yaml) whose node named --node-name this plugin simulates (required)")
	fs.StringVar(&s.xidFile, "inject-xid-file", "", "file whose new lines \"<gpu uuid|index|all> <xid>\" inject Xid errors (default <state dir>/inject-xid)")
}

// open builds the simulated NVML of node and starts watching the Xid
// injection file until ctx ends.
func (s *simFlags) open(ctx context.Context, cfg config.Config, node string) (gpu.DeviceLib, int, error) {
	if s.file == "" {
		return nil, 0, errNoSimFile
	}
	file, err := simconfig.Load(s.file)
	if err != nil {
		return nil, 0, fmt.Errorf("--sim-file: %w", err)
	}
	n, ok := file.Find(node)
	if !ok {
		return nil, 0, fmt.Errorf("%w: --sim-file=%s has no node %q (its nodes are <namePrefix>-<k>; check --node-name)", errNoSimNode, s.file, node)
	}
	sim := nvmlsim.New(n)
	lib, err := gpu.New(sim)
	if err != nil {
		return nil, 0, err
	}
	xidFile := s.xidFile
	if xidFile == "" {
		xidFile = filepath.Join(cfg.StateDir, "inject-xid")
	}
	go nvmlsim.InjectFile{Sim: sim, Path: xidFile}.Run(ctx)
	klog.FromContext(ctx).Info("Simulating NVML", "file", s.file, "gpus", len(n.GPUs), "topology", n.Topology, "xidInjectionFile", xidFile)
	return lib, n.GPUs[0].MaxShares, nil
}
