// Command vgpu-device-plugin-sim is the device plugin of a simulated node of
// the local cluster: the shipped device plugin (package device-plugin/app,
// same flags, same configuration) on a simulated NVML built from the node
// named --node-name in a simulated-cluster file (e2e/sim/clusters/*.yaml).
// No GPU or driver is needed. Lines appended to --inject-xid-file inject Xid
// errors into the simulated NVML's event set. The GPUs' MIG instances are
// kept in --mig-state-file, so a restart finds them as on a real GPU.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/spf13/pflag"
	"k8s.io/klog/v2"

	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/app"
	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/compute"
	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/config"
	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/gpu"
	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/memguard"
	"github.com/volcano-vgpu/volcano-vgpu/e2e/sim/simconfig"
	"github.com/volcano-vgpu/volcano-vgpu/e2e/sim/simnode"
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
	// The compute controller needs the GPUs' busy time: with these, it reads
	// it from the fake driver's NVML (vcuda/fake) over the node's GPU state
	// files, the ones the container emulator gives the node's containers.
	fakeNVML, fakeGPUDir string
	// fakeProcRoot: the node's processes as the container emulator places
	// them (containeremu.Config.NodeProcRoot), read as the host's /proc.
	fakeProcRoot string
	// migGPUs: GPUs whose MIG mode is on beyond the file's migGPUs.
	migGPUs []int
	// migState keeps the simulated MIG instances across restarts.
	migState string
}

func (s *simFlags) bind(fs *pflag.FlagSet) {
	fs.StringVar(&s.file, "sim-file", "", "simulated-cluster file (e2e/sim/clusters/*.yaml) whose node named --node-name this plugin simulates (required)")
	fs.StringVar(&s.xidFile, "inject-xid-file", "", "file whose new lines \"<gpu uuid|index|all> <xid>\" inject Xid errors (default <state dir>/inject-xid)")
	fs.StringVar(&s.fakeNVML, "fake-nvml", "", "the fake driver's libnvidia-ml.so.1 (vcuda/_build/fake): run the compute controller on it")
	fs.StringVar(&s.fakeGPUDir, "fake-gpu-dir", "", "with --fake-nvml: the node's simulated GPU state files (the container emulator's)")
	fs.StringVar(&s.fakeProcRoot, "fake-proc-root", "", "with --fake-nvml: the node's emulated containers' processes (<root>/<pid>/cgroup), read as the host's /proc (default /proc)")
	fs.StringVar(&s.migState, "mig-state-file", "", "file that keeps the simulated GPUs' MIG instances across restarts (default <state dir>/sim-mig-state.json)")
	fs.IntSliceVar(&s.migGPUs, "mig-gpus", nil, "indexes of the node's GPUs whose MIG mode is on, beside the file's migGPUs (as nvidia-smi -i N -mig 1 leaves them before the plugin starts)")
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
	if n, err = n.WithMIG("--mig-gpus", s.migGPUs); err != nil {
		return nil, 0, err
	}
	xidFile := s.xidFile
	if xidFile == "" {
		xidFile = filepath.Join(cfg.StateDir, "inject-xid")
	}
	migState := s.migState
	if migState == "" {
		migState = filepath.Join(cfg.StateDir, "sim-mig-state.json")
	}
	lib, maxShares, err := simnode.Open(ctx, n, simnode.Xid{File: xidFile}, migState)
	if err != nil {
		return nil, 0, err
	}
	klog.FromContext(ctx).Info("Simulating NVML", "file", s.file, "gpus", len(n.GPUs), "topology", n.Topology, "xidInjectionFile", xidFile, "migStateFile", migState)
	if s.fakeNVML == "" {
		return lib, maxShares, nil
	}
	src, mem, err := s.computeSource(n)
	if err != nil {
		return nil, 0, err
	}
	klog.FromContext(ctx).Info("Compute controller on the fake driver's NVML", "lib", s.fakeNVML, "gpuDir", s.fakeGPUDir, "procRoot", s.fakeProcRoot)
	mig, ok := lib.(gpu.MIGManager)
	if !ok {
		return nil, 0, fmt.Errorf("simulated node %s: the simulated NVML cannot create MIG instances", node)
	}
	return withCompute{DeviceLib: lib, MIGManager: mig, src: src, mem: mem, procRoot: s.fakeProcRoot}, maxShares, nil
}

// withCompute is a simulated device library whose GPUs' busy time and
// running processes come from the fake driver; its MIG instances are the
// simulated NVML's.
type withCompute struct {
	gpu.DeviceLib
	gpu.MIGManager
	src      compute.Source
	mem      memguard.Source
	procRoot string
}

var _ gpu.MIGManager = withCompute{}

func (w withCompute) ComputeSource() compute.Source { return w.src }

// MemorySource feeds the memory guard the fake driver's processes.
func (w withCompute) MemorySource() memguard.Source { return w.mem }

// ProcRoot is where the plugin finds its processes' cgroups ("": /proc).
func (w withCompute) ProcRoot() string { return w.procRoot }

// computeSource loads the fake NVML over the node's GPU state files. The
// fake reads its devices from the environment once, at init.
func (s *simFlags) computeSource(n simconfig.Node) (compute.Source, memguard.Source, error) {
	if s.fakeGPUDir == "" {
		return nil, nil, errors.New("--fake-nvml needs --fake-gpu-dir")
	}
	if err := os.MkdirAll(s.fakeGPUDir, 0o755); err != nil {
		return nil, nil, err
	}
	devs := make([]string, len(n.GPUs))
	for i, g := range n.GPUs {
		devs[i] = fmt.Sprintf("%s:%d", g.UUID, g.MemoryMiB)
	}
	os.Setenv("FAKEGPU_DIR", s.fakeGPUDir)
	os.Setenv("FAKEGPU_DEVICES", strings.Join(devs, ","))
	lib := nvml.New(nvml.WithLibraryPath(s.fakeNVML))
	if ret := lib.Init(); ret != nvml.SUCCESS {
		return nil, nil, fmt.Errorf("--fake-nvml=%s: init: %v (make -C vcuda builds it)", s.fakeNVML, ret)
	}
	return &compute.NVMLSource{Lib: lib}, &memguard.NVMLSource{Lib: lib}, nil
}
