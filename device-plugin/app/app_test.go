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
