package plugin

import (
	"context"
	"errors"
	"fmt"

	"k8s.io/klog/v2"

	"github.com/volcano-vgpu/volcano-vgpu/api"
	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/cdi"
	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/containerdir"
	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/gpu"
)

// migIDs is what the device nodes of a MIG GPU's MIG devices are named
// after: the GPU's device minor and each MIG device's instance IDs.
type migIDs struct {
	minor int
	ids   map[string]gpu.MIGIDs // by MIG UUID
}

// anyMIG reports whether a device is a MIG instance.
func anyMIG(devs []api.DeviceShare) bool {
	for _, d := range devs {
		if d.MIG != nil {
			return true
		}
	}
	return false
}

// migCDI is what the CDI spec of a container's MIG devices is written
// from: the driver's MIG capability minors and the toolkit's spec-level
// edits (the driver's libraries and hooks; none without a toolkit spec).
type migCDI struct {
	minors cdi.MIGMinors
	driver cdi.ContainerEdits
}

// readMIGCDI reads the driver's MIG capability minors (cdi.migMinors) and
// the toolkit's spec (cdi.toolkitSpecDirs) for the CDI spec of a
// container's MIG devices. A missing or malformed minors file or a
// malformed toolkit spec refuses the container (ErrMIGNotServed) before an
// instance is created; no toolkit spec is logged once (the NVIDIA runtime
// hook, where there is one, mounts the libraries from
// NVIDIA_VISIBLE_DEVICES).
func (p *Plugin) readMIGCDI(ctx context.Context) (migCDI, error) {
	c := p.opts.Config.CDI
	m, err := cdi.ReadMIGMinors(c.MIGMinors)
	if err != nil {
		return migCDI{}, fmt.Errorf("%w: CDI mode names each MIG device in the plugin's own spec, with its device nodes: %w", ErrMIGNotServed, err)
	}
	tk, err := cdi.ToolkitEdits(c.ToolkitSpecDirs, c.Kind)
	if err != nil {
		return migCDI{}, fmt.Errorf("%w: the driver's libraries and hooks for a MIG device come from the NVIDIA toolkit's CDI spec, which a whole GPU's container (%s=...) could not use either; regenerate it (nvidia-ctk cdi generate): %w", ErrMIGNotServed, c.Kind, err)
	}
	logger := klog.FromContext(ctx)
	if !tk.Found() {
		if p.noToolkitSpecLogged.CompareAndSwap(false, true) {
			logger.Info("No NVIDIA CDI spec found: MIG containers get their device nodes and NVIDIA_VISIBLE_DEVICES from the plugin's spec but no driver libraries unless the runtime runs the NVIDIA runtime hook",
				"kind", c.Kind, "cdi.toolkitSpecDirs", c.ToolkitSpecDirs)
		}
	} else {
		p.noToolkitSpecLogged.Store(false)
		logger.V(5).Info("Driver edits for MIG devices", "specs", tk.Files)
	}
	return migCDI{minors: m, driver: tk.Edits}, nil
}

// migSpec writes the CDI spec of rec's MIG devices (their MIG UUIDs filled
// in by serveMIG) and returns their names; none without MIG devices.
func (p *Plugin) migSpec(rec containerdir.Record, mc migCDI) ([]string, error) {
	var devs []cdi.MIGDevice
	p.migMu.RLock()
	for _, d := range rec.Devices {
		if d.MIG == nil {
			continue
		}
		hw := p.migIDs[d.UUID]
		ids, ok := hw.ids[d.MIG.UUID]
		if !ok {
			p.migMu.RUnlock()
			return nil, fmt.Errorf("%w: MIG device %s of GPU %s: NVML did not list its instance IDs at the last read", ErrMIGNotServed, d.MIG.UUID, d.UUID)
		}
		devs = append(devs, cdi.MIGDevice{UUID: d.MIG.UUID, GPUMinor: hw.minor, GI: ids.GI, CI: ids.CI})
	}
	p.migMu.RUnlock()
	if len(devs) == 0 {
		return nil, nil
	}
	names, err := p.specs.WriteMIG(rec.PodUID, rec.Container, mc.minors, mc.driver, devs)
	if errors.Is(err, cdi.ErrNoMIGMinors) {
		return nil, fmt.Errorf("%w: %w", ErrMIGNotServed, err)
	}
	if err != nil {
		return nil, fmt.Errorf("writing the CDI spec of the container's MIG devices under cdi.specDir %s: %w", p.specs.Dir, err)
	}
	return names, nil
}
