package app

import (
	"context"
	"errors"
	"testing"

	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/config"
	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/gpu"
)

func TestRunNeedsANodeName(t *testing.T) {
	t.Setenv("NODE_NAME", "")
	open := func(context.Context, config.Config, string) (gpu.DeviceLib, int, error) {
		t.Fatal("the device library was opened without a node name")
		return nil, 0, nil
	}
	if err := Run(t.Context(), Flags{}, open); !errors.Is(err, ErrNoNodeName) {
		t.Fatalf("Run = %v, want ErrNoNodeName", err)
	}
}

func TestRunReturnsTheOpenError(t *testing.T) {
	errOpen := errors.New("no GPUs here")
	var gotNode string
	open := func(_ context.Context, _ config.Config, node string) (gpu.DeviceLib, int, error) {
		gotNode = node
		return nil, 0, errOpen
	}
	if err := Run(t.Context(), Flags{NodeName: "n1"}, open); !errors.Is(err, errOpen) {
		t.Fatalf("Run = %v, want the opener's error", err)
	}
	if gotNode != "n1" {
		t.Errorf("opened node %q, want n1", gotNode)
	}
}

// brokenLib is a device library whose GPU discovery fails, as NVML does
// when the driver is gone.
type brokenLib struct{ err error }

var _ gpu.DeviceLib = brokenLib{}

func (b brokenLib) Devices() ([]gpu.Device, error)              { return nil, b.err }
func (b brokenLib) Topology([]gpu.Device) (gpu.Topology, error) { return gpu.Topology{}, b.err }
func (b brokenLib) Events([]gpu.Device) (gpu.Events, error)     { return nil, b.err }
func (b brokenLib) Probe(string) error                          { return b.err }
func (b brokenLib) MIG(string) (gpu.MIG, error)                 { return gpu.MIG{}, b.err }
func (b brokenLib) Shutdown()                                   {}

func TestRunNodeReturnsTheDiscoveryError(t *testing.T) {
	errGone := errors.New("driver gone")
	cfg := config.Default()
	cfg.StateDir = t.TempDir()
	cfg.Kubelet.PodResourcesSocket = t.TempDir() + "/kubelet.sock"
	err := RunNode(t.Context(), Node{Name: "n1", Config: cfg, Lib: brokenLib{err: errGone}}, nil)
	if !errors.Is(err, errGone) {
		t.Fatalf("RunNode = %v, want the device library's error", err)
	}
}
