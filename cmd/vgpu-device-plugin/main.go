// Command vgpu-device-plugin is the volcano-vgpu device plugin of one node:
// it registers volcano.sh/vgpu-number with kubelet, publishes the node's
// GPU inventory and vgpu-memory/vgpu-cores capacity, and gives each
// container exactly the GPUs and limits the scheduler assigned it.
//
// It runs on the node's NVML (libnvidia-ml.so.1); everything else is in
// package device-plugin/app.
package main

import (
	"context"
	"os"

	"k8s.io/klog/v2"

	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/app"
	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/config"
	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/gpu"
)

func main() {
	app.Main("vgpu-device-plugin", nil, openNVML)
}

// openNVML opens the node's NVML and warns when the limiter library the
// containers will be given, or the CDI hook the runtime will run, is missing
// on the host.
func openNVML(ctx context.Context, cfg config.Config, _ string) (gpu.DeviceLib, int, error) {
	lib, err := gpu.Open()
	if err != nil {
		return nil, 0, err
	}
	if _, err := os.Stat(cfg.Limiter.HostLibrary); err != nil {
		klog.FromContext(ctx).Error(err, "libvcuda.so is missing on the host; containers will fail to start until it is installed", "limiter.hostLibrary", cfg.Limiter.HostLibrary)
	}
	if cfg.CDI.KeepsPreload() && cfg.PreloadEnabled() {
		if _, err := os.Stat(cfg.CDI.HookPath); err != nil {
			klog.FromContext(ctx).Error(err, "vgpu-cdi-hook is missing on the host; containers will fail to start until it is installed (or set cdi.keepImagePreload: false)", "cdi.hookPath", cfg.CDI.HookPath)
		}
	}
	return lib, 0, nil
}
