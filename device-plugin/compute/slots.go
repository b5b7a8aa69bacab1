package compute

import (
	"math"
	"sort"
	"time"

	"github.com/volcano-vgpu/volcano-vgpu/api"
)

// slotPeriod: where several tenants of a GPU are held to a rate, each gets
// a slot of every slotPeriod of CLOCK_MONOTONIC, as long as its target's
// part of it, one after the other (api.Slot); libvcuda releases a held-back
// launch at its slot's start. A GPU without MPS time-slices the contexts
// that have work queued, about every 2 ms, and each switch is busy time no
// tenant gets (170 µs on an H200: two unlimited tenants got 45.9 + 45.9% of
// their solo rates). Released in slots, one tenant's queue has drained when
// the next one's fills: two switches a period, not one a slice.
//
// Longer slots lose less to switches and make a held-back launch wait
// longer (up to the period less its slot). The node's bank holds a period
// of the rate, so a tenant waiting for its slot loses no credit.
const slotPeriod = 40 * time.Millisecond

// slotPeriodFor is slotPeriod or longer, a whole fraction of the
// controller's period P (ns; P itself where shorter): each device window
// then holds whole slot periods, and a burst cut by a window's edge is cut
// at the same place in every window.
func slotPeriodFor(P float64) float64 {
	return P / max(math.Floor(P/float64(slotPeriod)), 1)
}

// slotted: the tenants that get slots this period, those held to a rate
// that are active, where there are two or more of them.
func (g *GPU) slotted(ts []TenantInput, shares map[string]float64) map[string]bool {
	out := map[string]bool{}
	for _, t := range ts {
		if t.Policy != api.ComputeNone && shares[t.Key] < 0.999 && g.tenants[t.Key].idle < activeAfter {
			out[t.Key] = true
		}
	}
	if len(out) < 2 {
		return nil
	}
	return out
}

// assignSlots gives each slotted tenant's limited decision its slot: in key
// order, each as long as its target's part of the period (the targets
// scaled to fit where they sum past the whole GPU); what the targets leave
// is the period's end, for best-effort and foreign work.
func assignSlots(ds []Decision, slotted map[string]bool, P float64) {
	var keys []int
	var sum float64
	for i, d := range ds {
		if slotted[d.Key] && d.Control.Mode == api.ControlLimited && d.Control.Rate > 0 {
			keys = append(keys, i)
			sum += max(d.Share+d.Lent, 0)
		}
	}
	if len(keys) < 2 || sum <= 0 {
		return
	}
	sort.Slice(keys, func(a, b int) bool { return ds[keys[a]].Key < ds[keys[b]].Key })
	scale := 1 / max(sum, 1)
	sp := uint32(slotPeriodFor(P) / 1000)
	var at uint32
	for _, i := range keys {
		n := uint32(math.Round(float64(sp) * max(ds[i].Share+ds[i].Lent, 0) * scale))
		n = min(max(n, 1), sp-at)
		ds[i].Control.Slot = api.Slot{PeriodUs: sp, StartUs: at, LenUs: n}
		at += n
	}
}
