package plugin

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"k8s.io/klog/v2"

	"github.com/volcano-vgpu/volcano-vgpu/api"
	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/config"
	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/gpu"
)

// ErrMIGConfig is wrapped when the configuration and a GPU's MIG state
// disagree; the plugin does not start.
var ErrMIGConfig = errors.New("MIG configuration does not fit the GPU")

// ErrMIGNotServed is wrapped when Allocate refuses a container's MIG
// assignment: a share of a GPU in MIG mode, a MIG instance of a GPU that is
// not, a profile or placement the GPU does not have, an instance another
// pod holds.
var ErrMIGNotServed = errors.New("cannot hand out the MIG instance")

// ErrMIGCreate is wrapped when Allocate could not create the container's
// MIG instance; NVML's reason follows.
var ErrMIGCreate = errors.New("cannot create the MIG instance")

// discoverMIG reads the MIG state of every described GPU, checks it against
// sharing and mig, and keeps what the GPUs in mode mig publish. It runs at
// start; the instances are read again after each change the plugin makes
// and by the MIG reconciler (reconcileMIG).
func (p *Plugin) discoverMIG(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	p.mig, p.migIDs = map[string]*api.MIG{}, map[string]migIDs{}
	for _, d := range p.devices {
		if d.Failure != "" {
			continue
		}
		m, err := p.opts.Lib.MIG(d.UUID)
		if err != nil {
			return err
		}
		state, err := migState(d, p.mode(d), p.opts.Config.MIG.GeometryFor(d.Model, d.UUID), m)
		if err != nil {
			return err
		}
		if len(m.Unnamed) > 0 {
			logger.V(2).Info("MIG profiles not offered: no name for them", "gpu", d.UUID, "profileIDs", m.Unnamed)
		}
		if state != nil {
			p.mig[d.UUID] = state
			p.migIDs[d.UUID] = migIDs{minor: m.Minor, ids: m.IDs}
			logger.V(2).Info("MIG GPU", "gpu", d.UUID, "index", d.Index, "geometry", state.Geometry, "profiles", len(state.Profiles), "instances", len(state.Instances))
		}
	}
	return nil
}

// migState is what GPU d, whose MIG state is m, publishes in mode mode with
// the configured geometry (nil: on-demand); nil outside mode mig. Every
// disagreement is an error that names the GPU and the fix.
func migState(d gpu.Device, mode api.GPUMode, geometry config.Geometry, m gpu.MIG) (*api.MIG, error) {
	gpuName := fmt.Sprintf("GPU %s (index %d, %s)", d.UUID, d.Index, d.Model)
	switch {
	case mode != api.ModeMIG && m.Enabled:
		return nil, fmt.Errorf("%w: %s has MIG mode on, and sharing gives it mode %s, which shares the whole GPU: give it mode mig (sharing.gpus[%q]: mig) or turn MIG off (nvidia-smi -i %d -mig 0)",
			ErrMIGConfig, gpuName, mode, d.UUID, d.Index)
	case mode != api.ModeMIG:
		return nil, nil
	case !m.Capable:
		return nil, fmt.Errorf("%w: sharing gives %s mode mig, but it has no MIG mode (A100, A30, H100 and newer data-center GPUs have one): give it mode time-sliced or mps", ErrMIGConfig, gpuName)
	case !m.Enabled && m.Pending:
		return nil, fmt.Errorf("%w: sharing gives %s mode mig; its MIG mode is on from its next reset: reset the GPU (nvidia-smi -i %d -r) or reboot the node", ErrMIGConfig, gpuName, d.Index)
	case !m.Enabled:
		return nil, fmt.Errorf("%w: sharing gives %s mode mig, but its MIG mode is off: turn it on with nvidia-smi -i %d -mig 1 (or give the GPU another mode)", ErrMIGConfig, gpuName, d.Index)
	case len(m.Profiles) == 0:
		return nil, fmt.Errorf("%w: %s is in MIG mode but NVML lists no GPU instance profile this plugin can name", ErrMIGConfig, gpuName)
	}
	state := &api.MIG{Geometry: api.MIGOnDemand, MemorySlices: m.MemorySlices, Profiles: m.Profiles, Instances: m.Instances}
	if geometry == nil {
		return state, nil
	}
	state.Geometry = api.MIGFixed
	var known []string
	for _, p := range m.Profiles {
		known = append(known, p.Name)
	}
	for _, name := range geometry {
		if !slices.Contains(known, name) {
			return nil, fmt.Errorf("%w: mig geometry of %s names profile %s, which the GPU does not have: use its profiles, %s", ErrMIGConfig, gpuName, name, strings.Join(known, ", "))
		}
	}
	var have []string
	for _, in := range m.Instances {
		have = append(have, in.Profile)
		if in.UUID == "" {
			return nil, fmt.Errorf("%w: %s: the %s instance at memory slices %v has no compute instance: create it (nvidia-smi mig -i %d -cci)", ErrMIGConfig, gpuName, in.Profile, in.Placement, d.Index)
		}
	}
	want := slices.Clone(geometry)
	slices.Sort(want)
	slices.Sort(have)
	if !slices.Equal(want, have) {
		return nil, fmt.Errorf("%w: the mig geometry of %s is [%s] and the GPU holds [%s]: make them agree (nvidia-smi mig -i %d -dci; nvidia-smi mig -i %d -dgi; nvidia-smi mig -i %d -cgi %s -C), or remove the GPU's geometry for on-demand instances",
			ErrMIGConfig, gpuName, strings.Join(want, ", "), strings.Join(have, ", "), d.Index, d.Index, d.Index, strings.Join(geometry, ","))
	}
	return state, nil
}

// migOf is a copy of the MIG state GPU uuid publishes; nil outside mode mig.
func (p *Plugin) migOf(uuid string) *api.MIG {
	p.migMu.RLock()
	defer p.migMu.RUnlock()
	m := p.mig[uuid]
	if m == nil {
		return nil
	}
	c := *m
	c.Profiles = slices.Clone(m.Profiles)
	for i := range c.Profiles {
		c.Profiles[i].Placements = slices.Clone(m.Profiles[i].Placements)
	}
	c.Instances = slices.Clone(m.Instances)
	return &c
}
