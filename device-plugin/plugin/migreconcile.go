package plugin

import (
	"context"
	"errors"
	"maps"
	"slices"
	"time"

	"k8s.io/klog/v2"

	"github.com/volcano-vgpu/volcano-vgpu/api"
	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/gpu"
	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/migledger"
)

// migClaim is a live pod's claim on a MIG placement (its assignment).
type migClaim struct {
	podUID  string
	profile string
	// taken: the scheduler took over an instance that existed (the
	// assignment names its UUID); false: it asked for a new one.
	taken bool
}

// migClaimsLocked lists the MIG placements the assignments of the pods
// bound here hold. Called with p.mu held.
func (p *Plugin) migClaimsLocked() map[migledger.Key]migClaim {
	out := map[migledger.Key]migClaim{}
	for uid, e := range p.pods {
		if e.match.Err != nil {
			continue
		}
		for _, c := range e.assignment.Containers {
			for _, d := range c.Devices {
				if d.MIG != nil {
					out[migledger.Key{GPU: d.UUID, Placement: d.MIG.Placement}] = migClaim{podUID: uid, profile: d.MIG.Profile, taken: d.MIG.UUID != ""}
				}
			}
		}
	}
	return out
}

// reconcileMIG squares the MIG instances with the pods bound here, after a
// restart and then periodically:
//   - an instance at a placement a live pod's assignment holds is adopted:
//     the ledger says it serves that pod (created by the plugin when the
//     scheduler asked for a new instance there on an on-demand GPU);
//   - an instance the plugin created on an on-demand GPU whose pod is gone
//     is destroyed, unless processes run on it (NVML in use): it is tried
//     again next time;
//   - the ledger forgets instances that are gone, and pods' uses of
//     instances the plugin did not create once the pods are gone.
//
// The instances are read from NVML first and published again when anything
// changed. Nothing is destroyed before the pod cache has synced.
func (p *Plugin) reconcileMIG(ctx context.Context) {
	logger := klog.FromContext(ctx)
	gpus := p.migGPUs()
	if len(gpus) == 0 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.synced {
		return
	}
	all := map[string]bool{}
	before := map[string][]api.MIGInstance{}
	for _, g := range gpus {
		all[g] = true
		if m := p.migOf(g); m != nil {
			before[g] = m.Instances
		}
	}
	p.refreshMIG(ctx, all)
	claims := p.migClaimsLocked()
	changed := map[string]bool{}
	forget := func(k migledger.Key, why string) {
		if err := p.migs.Delete(k); err != nil {
			logger.Error(err, "Updating the MIG ledger", "gpu", k.GPU, "placement", k.Placement)
			return
		}
		logger.V(4).Info("MIG ledger: forgot an instance", "gpu", k.GPU, "placement", k.Placement, "why", why)
	}
	present := map[migledger.Key]bool{}
	for _, uuid := range gpus {
		state := p.migOf(uuid)
		if state == nil {
			continue
		}
		for _, in := range state.Instances {
			k := migledger.Key{GPU: uuid, Placement: in.Placement}
			present[k] = true
			entry, inLedger := p.migs.Get(k)
			if inLedger && (entry.UUID != in.UUID || entry.Profile != in.Profile) {
				forget(k, "another instance took its place")
				entry, inLedger = migledger.Entry{}, false
			}
			claim, claimed := claims[k]
			switch {
			case claimed && claim.profile == in.Profile && in.UUID != "":
				if inLedger && entry.PodUID == claim.podUID {
					continue
				}
				if inLedger && in.InUse {
					// another pod's processes still run on it: the new pod's
					// Allocate refuses it until they are gone
					logger.V(2).Info("Not adopting a MIG instance in use for another pod", "gpu", uuid, "placement", in.Placement, "mig", in.UUID, "holder", entry.PodUID, "claimant", claim.podUID)
					continue
				}
				created := entry.Created
				if !inLedger {
					created = state.Geometry == api.MIGOnDemand && !claim.taken
				}
				adopt := migledger.Entry{GPU: uuid, Profile: in.Profile, Placement: in.Placement, UUID: in.UUID, PodUID: claim.podUID, Created: created}
				if err := p.migs.Put(adopt); err != nil {
					logger.Error(err, "Adopting a MIG instance", "gpu", uuid, "placement", in.Placement)
					continue
				}
				logger.V(2).Info("Adopted a MIG instance of a live pod", "pod", p.names[claim.podUID], "gpu", uuid, "profile", in.Profile, "placement", in.Placement, "mig", in.UUID, "created", created)
			case !inLedger || claimed:
				// not the plugin's, or a live pod holds its slices: left alone
			case !entry.Created || state.Geometry != api.MIGOnDemand:
				forget(k, "its pod is gone; the plugin did not create it")
			case in.InUse:
				logger.V(2).Info("Keeping the MIG instance of a deleted pod: processes still run on it", "gpu", uuid, "placement", in.Placement, "mig", in.UUID, "podUID", entry.PodUID)
			default:
				if p.destroyMIG(ctx, entry) {
					changed[uuid] = true
				}
			}
		}
	}
	for _, e := range p.migs.Entries() {
		if all[e.GPU] && !present[e.Key()] {
			forget(e.Key(), "the instance is gone")
		}
	}
	if len(changed) > 0 {
		p.refreshMIG(ctx, changed)
	}
	for _, g := range gpus {
		if m := p.migOf(g); m != nil && !slices.Equal(before[g], m.Instances) {
			p.devicesChangedLocked() // publish what changed (in use, made or removed by the plugin or others)
			return
		}
	}
}

// destroyMIG destroys the instance of a pod that is gone and forgets it;
// false when it stays. Called with p.mu held.
func (p *Plugin) destroyMIG(ctx context.Context, e migledger.Entry) bool {
	logger := klog.FromContext(ctx)
	mgr := p.migManager()
	if mgr == nil {
		return false
	}
	err := mgr.DestroyMIG(e.GPU, e.Placement)
	switch {
	case errors.Is(err, gpu.ErrMIGInUse):
		logger.V(2).Info("Keeping the MIG instance of a deleted pod: it is in use", "gpu", e.GPU, "placement", e.Placement, "mig", e.UUID, "reason", err.Error())
		return false
	case errors.Is(err, gpu.ErrMIGNotFound):
	case err != nil:
		logger.Error(err, "Destroying the MIG instance of a deleted pod; trying again later", "gpu", e.GPU, "placement", e.Placement, "mig", e.UUID)
		return false
	default:
		logger.V(2).Info("Destroyed the MIG instance of a deleted pod", "gpu", e.GPU, "profile", e.Profile, "placement", e.Placement, "mig", e.UUID, "podUID", e.PodUID)
	}
	if err := p.migs.Delete(e.Key()); err != nil {
		logger.Error(err, "Updating the MIG ledger", "gpu", e.GPU, "placement", e.Placement)
	}
	return true
}

// migGPUs lists the GPUs in mode mig, sorted.
func (p *Plugin) migGPUs() []string {
	p.migMu.RLock()
	defer p.migMu.RUnlock()
	return slices.Sorted(maps.Keys(p.mig))
}

// migLoop runs reconcileMIG every period, and soon after the pods bound
// here change (a deleted pod's instance goes within a second or so).
func (p *Plugin) migLoop(ctx context.Context, period time.Duration) {
	if len(p.migGPUs()) == 0 {
		return
	}
	t := p.opts.Clock.NewTicker(period)
	defer t.Stop()
	for {
		p.mu.Lock()
		changed := p.podChanged
		p.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		case <-changed:
			select { // let a burst of pod events settle
			case <-ctx.Done():
				return
			case <-p.opts.Clock.After(time.Second):
			}
		}
		p.reconcileMIG(ctx)
	}
}
