package compute

import (
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
	phase   int      // the index of the tenant lent share
	since   uint64   // NowNs the phase began
	// switched: NowNs of the last change of targets; a window that began
	// before it (and a margin) holds launches at the old rates
	switched uint64
	lent     map[string]float64 // the last step's changes of target
}

// Excitation tunables.
const (
	excitePhaseNs  = 2e9   // how long one tenant holds the lent share
	exciteMarginNs = 100e6 // after a switch, before a window counts as clean (queued launches, a device sample averaging 1/6 s)
	exciteMax      = 0.1   // d: at most this much of the GPU taken from each other tenant
	exciteOfMin    = 0.3   // and at most this much of the smallest target
	// exciteKnown: of d, once the fit's costs are well determined. Enough
	// to follow a program whose cost changes; a tenant's share over a few
	// seconds swings by d (b 63.0 for 60 measured over 1.5 cycles, simulated).
	exciteKnown = 0.65
)

// step updates the turns for a period and returns each member's change of
// target (nil: none). shares are the tenants' targets; eligible are the
// tenants held to a share (not unlimited, not best effort) that launch.
// known: the fit's costs are well determined (the turns then lend less).
func (x *excitation) step(now uint64, on, known bool, shares map[string]float64, eligible []string) map[string]float64 {
	if !on || len(eligible) < 2 {
		if x.members != nil {
			x.members, x.switched = nil, now
		}
		x.lent = nil
		return nil
	}
	slices.Sort(eligible)
	switch {
	case !slices.Equal(eligible, x.members):
		x.members, x.phase, x.since, x.switched = slices.Clone(eligible), 0, now, now
	case float64(now-min(now, x.since)) >= excitePhaseNs:
		x.phase = (x.phase + 1) % len(x.members)
		x.since, x.switched = now, now
	}
	d := exciteMax
	for _, key := range x.members {
		d = min(d, exciteOfMin*shares[key])
	}
	if known {
		d *= exciteKnown
	}
	out := make(map[string]float64, len(x.members))
	for i, key := range x.members {
		out[key] = -d
		if i == x.phase {
			out[key] = d * float64(len(x.members)-1)
		}
	}
	x.lent = out
	return out
}

// clean says whether a window that began at start lies within one phase.
func (x *excitation) clean(start float64) bool {
	return x.switched == 0 || start >= float64(x.switched)+exciteMarginNs
}

// excitable: a tenant that may take turns, held to a share it asked.
func excitable(t TenantInput, share float64) bool {
	return t.Policy != api.ComputeNone && t.Share < 1 && share > 0 && share < 0.999
}
