package compute

import (
	"math"
	"slices"

	"github.com/volcano-vgpu/volcano-vgpu/api"
)

// Excitation: on a GPU whose per-process samples give no tenant's share
// (Input.Unshared: an H200 gives one sample a round, of one process, reading
// the whole device; or no samples are taken), tenants of different programs
// share one pooled cost and mis-share (1 warp vs 8 warps a block at 30 + 60
// got 72.0 + 18.0, a GEMM 50 beside an elementwise 50 got 99.1 + 0.1,
// simulated with the H200's samples). The device's busy time is reliable,
// but a steady loop gives it nothing to tell the tenants apart by. So the
// controller takes turns lending share: for a phase one tenant's target is
// raised by (n-1)·d and every other's lowered by d (the targets' sum, and so
// the GPU's load, stays where it was), and the windows within one phase fit
// each tenant's cost (estimator.regress). Every target averages to itself
// over a cycle. Turns alone (the others held) were tried first: they cost
// throughput and regressed cases of one program (docs/limiter.md).
type excitation struct {
	members []string // the tenants taking turns, sorted; none: off
	phase   int      // the turn: members[phase % len(members)] is lent share
	since   uint64   // NowNs the phase began
	// changes: the last changes of the targets (NowNs, what each tenant
	// was lent from then on): a window seen late tells which were in force
	changes []change
}

type change struct {
	at   uint64
	lend map[string]float64
}

// changesKept: enough for the windows seen up to a second late
const changesKept = 8

// Excitation tunables, from simulated runs of 15 mixes, 0-200 ms late
// samples (docs/limiter.md). A phase of 1 s is smeared by half a second of
// queued work (a deep-queued pair at 30 + 60 got 55.0 + 34.9); 2 s holds
// it. A tenant's share over a window shorter than a cycle (n phases) is off
// by up to about d × phase / window: d is kept small (0.1 missed more mixes
// than 0.05, by that ripple; 0.03 identified too slowly).
const (
	excitePhaseNs  = 2e9   // how long one tenant holds the lent share
	exciteMarginNs = 100e6 // a window that begins within this after a change of targets is not clean (queued launches, a device sample averaging 1/6 s)
	exciteMax      = 0.05  // d: at most this much of the GPU taken from each other tenant
	exciteOfMin    = 0.15  // and at most this much of the smallest target
)

// step updates the turns for a period and returns each member's change of
// target (nil: none). asked are the shares the tenants asked (not their
// targets, which move with lent capacity and foreign load: d follows only
// the turns, so that a change of it is a switch); eligible are the tenants
// held to a share (not unlimited, not best effort) that launch.
func (x *excitation) step(now uint64, on bool, asked map[string]float64, eligible []string) map[string]float64 {
	var out map[string]float64
	if on && len(eligible) >= 2 {
		slices.Sort(eligible)
		// The turns keep their clock when a tenant comes or goes: started
		// anew, the first tenant's turn came back each time a tenant that
		// launches now and then returned, and it kept the lent share.
		if x.members == nil {
			x.since = now
		}
		x.members = slices.Clone(eligible)
		if float64(now-min(now, x.since)) >= excitePhaseNs {
			x.phase++
			x.since = now
		}
		d := exciteMax
		for _, key := range x.members {
			d = min(d, exciteOfMin*asked[key])
		}
		out = make(map[string]float64, len(x.members))
		for i, key := range x.members {
			out[key] = -d
			if i == x.phase%len(x.members) {
				out[key] = d * float64(len(x.members)-1)
			}
		}
	} else {
		x.members = nil
	}
	if n := len(x.changes); n == 0 && out != nil || n > 0 && !sameLend(x.changes[n-1].lend, out) {
		x.changes = append(x.changes, change{at: now, lend: out})
		if len(x.changes) > changesKept {
			x.changes = x.changes[1:]
		}
	}
	return out
}

func sameLend(a, b map[string]float64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || math.Abs(v-w) > 1e-9 {
			return false
		}
	}
	return true
}

// clean says whether a window [start, end] (NowNs) lies within one phase:
// no change of the targets in it, nor in the margin before it.
func (x *excitation) clean(start, end float64) bool {
	for _, c := range x.changes {
		if at := float64(c.at); at > start-exciteMarginNs && at <= end {
			return false
		}
	}
	return true
}

// phaseAt names the phase in force at t (NowNs): when its targets were set
// (0: before any change).
func (x *excitation) phaseAt(t float64) uint64 {
	for i := len(x.changes) - 1; i >= 0; i-- {
		if float64(x.changes[i].at) <= t {
			return x.changes[i].at
		}
	}
	return 0
}

// lentAt is what each tenant was lent at t (NowNs): the targets in force
// over a window seen late.
func (x *excitation) lentAt(t float64) map[string]float64 {
	for i := len(x.changes) - 1; i >= 0; i-- {
		if float64(x.changes[i].at) <= t {
			return x.changes[i].lend
		}
	}
	return nil
}

// excitable: a tenant that may take turns, held to a share it asked.
func excitable(t TenantInput, share float64) bool {
	return t.Policy != api.ComputeNone && t.Share < 1 && share > 0 && share < 0.999
}
