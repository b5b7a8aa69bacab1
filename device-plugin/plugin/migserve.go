package plugin

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"k8s.io/klog/v2"

	"github.com/volcano-vgpu/volcano-vgpu/api"
	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/containerdir"
	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/gpu"
	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/migledger"
)

// migManager is the device library's MIGManager; nil when it has none.
func (p *Plugin) migManager() gpu.MIGManager {
	m, _ := p.opts.Lib.(gpu.MIGManager)
	return m
}

// serveMIG hands every MIG device of rec its instance and returns the
// devices with the MIG device UUID of each filled in (a copy: rec.Devices
// is the assignment's). The instance is the one at the assigned placement
// when it exists (the scheduler took it over, or an earlier Allocate of the
// same pod made it) and no other live pod holds it; else, on an on-demand
// GPU, the plugin creates it with the assigned profile at the assigned
// placement. Every instance handed out goes into the ledger under the pod.
// A share of a GPU in MIG mode is refused, as is a MIG instance of a GPU
// that is not. Called with p.mu held.
func (p *Plugin) serveMIG(ctx context.Context, rec containerdir.Record) ([]api.DeviceShare, error) {
	devs := slices.Clone(rec.Devices)
	current := map[string]bool{}
	for _, d := range devs {
		if d.MIG != nil && p.migOf(d.UUID) != nil {
			current[d.UUID] = true
		}
	}
	p.refreshMIG(ctx, current) // whether processes run on an instance now, not at the last read
	changed := map[string]bool{}
	defer func() {
		if len(changed) > 0 {
			p.refreshMIG(ctx, changed)
			p.devicesChangedLocked()
		}
	}()
	for i, d := range devs {
		state := p.migOf(d.UUID)
		switch {
		case d.MIG == nil && state == nil:
			continue
		case d.MIG == nil:
			return nil, fmt.Errorf("%w: container %q is assigned a share of GPU %s, which is in MIG mode: a MIG GPU serves whole MIG instances only (a scheduler that does not know MIG placed it; reschedule the pod)", ErrMIGNotServed, rec.Container, d.UUID)
		case state == nil:
			return nil, fmt.Errorf("%w: container %q is assigned the %s instance at memory slices %v of GPU %s, which this device plugin does not serve in mode mig (sharing): reschedule the pod, or give the GPU mode mig", ErrMIGNotServed, rec.Container, d.MIG.Profile, d.MIG.Placement, d.UUID)
		}
		uuid, created, err := p.instanceFor(ctx, rec, d, state)
		if err != nil {
			return nil, err
		}
		if created {
			changed[d.UUID] = true
		}
		m := *d.MIG
		m.UUID = uuid
		devs[i].MIG = &m
	}
	return devs, nil
}

// instanceFor finds or creates the instance of MIG device d (GPU state
// state) for rec's pod; created reports a new one.
func (p *Plugin) instanceFor(ctx context.Context, rec containerdir.Record, d api.DeviceShare, state *api.MIG) (string, bool, error) {
	logger := klog.FromContext(ctx)
	what := fmt.Sprintf("the %s instance at memory slices %v of GPU %s (container %q)", d.MIG.Profile, d.MIG.Placement, d.UUID, rec.Container)
	prof, ok := state.Profile(d.MIG.Profile)
	switch {
	case !ok:
		return "", false, fmt.Errorf("%w: %s: the GPU has no profile %s (reschedule the pod: the GPU's inventory changed since it was placed)", ErrMIGNotServed, what, d.MIG.Profile)
	case !prof.Legal(d.MIG.Placement):
		return "", false, fmt.Errorf("%w: %s: not a legal placement of %s, which are %v", ErrMIGNotServed, what, prof.Name, prof.Placements)
	}
	key := migledger.Key{GPU: d.UUID, Placement: d.MIG.Placement}
	entry, inLedger := p.migs.Get(key)
	for _, in := range state.Instances {
		if !in.Placement.Overlaps(d.MIG.Placement) {
			continue
		}
		if in.Placement != d.MIG.Placement || in.Profile != d.MIG.Profile {
			return "", false, fmt.Errorf("%w: %s: the %s instance at memory slices %v holds those slices (reschedule the pod)", ErrMIGNotServed, what, in.Profile, in.Placement)
		}
		mine := inLedger && entry.UUID == in.UUID && entry.PodUID == rec.PodUID
		if !mine && inLedger && entry.UUID == in.UUID && entry.PodUID != "" && p.pods[entry.PodUID] != nil {
			return "", false, fmt.Errorf("%w: %s: the instance (%s) serves pod %s (reschedule the pod)", ErrMIGNotServed, what, in.UUID, p.names[entry.PodUID])
		}
		switch {
		case in.UUID == "":
			return "", false, fmt.Errorf("%w: %s: the instance has no compute instance: create one (nvidia-smi mig -i <GPU index> -gi <GPU instance ID> -cci) or destroy the GPU instance", ErrMIGNotServed, what)
		case in.InUse && !mine:
			return "", false, fmt.Errorf("%w: %s: processes run on the instance (%s) and it serves no pod of this plugin (reschedule the pod)", ErrMIGNotServed, what, in.UUID)
		}
		created := inLedger && entry.UUID == in.UUID && entry.Created
		if d.MIG.UUID != "" && d.MIG.UUID != in.UUID {
			logger.V(2).Info("The MIG instance the scheduler took over was replaced; handing out the one there now", "gpu", d.UUID, "placement", d.MIG.Placement, "assigned", d.MIG.UUID, "instance", in.UUID)
		}
		if err := p.migs.Put(migledger.Entry{GPU: d.UUID, Profile: in.Profile, Placement: in.Placement, UUID: in.UUID, PodUID: rec.PodUID, Created: created}); err != nil {
			return "", false, fmt.Errorf("%s: %w", what, err)
		}
		logger.V(4).Info("Handing out an existing MIG instance", "pod", klog.KRef(rec.Namespace, rec.Name), "gpu", d.UUID, "profile", in.Profile, "placement", in.Placement, "mig", in.UUID)
		return in.UUID, false, nil
	}
	if state.Geometry == api.MIGFixed {
		return "", false, fmt.Errorf("%w: %s: the GPU's fixed geometry (mig.models, mig.gpus) has no instance there now: recreate the geometry's instances (nvidia-smi mig -cgi … -C) and restart the device plugin", ErrMIGNotServed, what)
	}
	mgr := p.migManager()
	if mgr == nil {
		return "", false, fmt.Errorf("%w: %s: this device library cannot create MIG instances", ErrMIGCreate, what)
	}
	uuid, err := mgr.CreateMIG(d.UUID, d.MIG.Profile, d.MIG.Placement)
	if err != nil {
		return "", false, fmt.Errorf("%w: %s: %w", ErrMIGCreate, what, err)
	}
	if err := p.migs.Put(migledger.Entry{GPU: d.UUID, Profile: d.MIG.Profile, Placement: d.MIG.Placement, UUID: uuid, PodUID: rec.PodUID, Created: true}); err != nil {
		if derr := mgr.DestroyMIG(d.UUID, d.MIG.Placement); derr != nil {
			err = errors.Join(err, fmt.Errorf("and destroying the instance again: %w", derr))
		}
		return "", false, fmt.Errorf("%w: %s: %w", ErrMIGCreate, what, err)
	}
	logger.V(2).Info("Created a MIG instance", "pod", klog.KRef(rec.Namespace, rec.Name), "gpu", d.UUID, "profile", d.MIG.Profile, "placement", d.MIG.Placement, "mig", uuid)
	return uuid, true, nil
}

// refreshMIG reads the instances of the given MIG GPUs from NVML again and
// publishes them (the profiles and geometry stay those found at start).
func (p *Plugin) refreshMIG(ctx context.Context, gpus map[string]bool) {
	for uuid := range gpus {
		m, err := p.opts.Lib.MIG(uuid)
		if err != nil {
			klog.FromContext(ctx).Error(err, "Reading a GPU's MIG instances again; publishing the last ones read", "gpu", uuid)
			continue
		}
		p.migMu.Lock()
		if state := p.mig[uuid]; state != nil {
			c := *state
			c.Instances = m.Instances
			p.mig[uuid] = &c
			p.migIDs[uuid] = migIDs{minor: m.Minor, ids: m.IDs}
		}
		p.migMu.Unlock()
	}
}

// devicesChangedLocked is healthChanged with p.mu held: the node report
// publishes the inventory again.
func (p *Plugin) devicesChangedLocked() {
	close(p.devChanged)
	p.devChanged = make(chan struct{})
}

// migVisible is the devices as the container sees them: a MIG device by its
// MIG UUID, with no compute share (the instance's SMs are its own).
func migVisible(devs []api.DeviceShare) []api.DeviceShare {
	out := slices.Clone(devs)
	for i, d := range out {
		if d.MIG != nil {
			out[i].UUID, out[i].Cores = d.MIG.UUID, 0
		}
	}
	return out
}

// allMIG reports whether every device is a MIG instance.
func allMIG(devs []api.DeviceShare) bool {
	for _, d := range devs {
		if d.MIG == nil {
			return false
		}
	}
	return len(devs) > 0
}
