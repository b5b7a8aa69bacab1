package plugin

import (
	"errors"
	"fmt"

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

// migMinors reads the driver's MIG capability minors (cdi.migMinors) for
// the CDI spec of a container's MIG devices; a missing or malformed file
// refuses the container (ErrMIGNotServed) before an instance is created.
func (p *Plugin) migMinors() (cdi.MIGMinors, error) {
	m, err := cdi.ReadMIGMinors(p.opts.Config.CDI.MIGMinors)
	if err != nil {
		return nil, fmt.Errorf("%w: CDI mode names each MIG device in the plugin's own spec, with its device nodes: %w", ErrMIGNotServed, err)
	}
	return m, nil
}

// migSpec writes the CDI spec of rec's MIG devices (their MIG UUIDs filled
// in by serveMIG) and returns their names; none without MIG devices.
func (p *Plugin) migSpec(rec containerdir.Record, minors cdi.MIGMinors) ([]string, error) {
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
	names, err := p.specs.WriteMIG(rec.PodUID, rec.Container, minors, devs)
	if errors.Is(err, cdi.ErrNoMIGMinors) {
		return nil, fmt.Errorf("%w: %w", ErrMIGNotServed, err)
	}
	if err != nil {
		return nil, fmt.Errorf("writing the CDI spec of the container's MIG devices under cdi.specDir %s: %w", p.specs.Dir, err)
	}
	return names, nil
}
