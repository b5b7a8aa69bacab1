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

// confineForeign: the slots confine only while work no tenant owns takes
// less of the GPU than this: confined, the tenants would still slice with it.
const confineForeign = 0.05

// sampleWindow: how long a device utilization sample averages, 1/6 s on
// the datacenter GPUs whose samples come 100 or 200 ms apart (NVML's
// shortest sample period; the fake driver's FAKEGPU_SAMPLE_WINDOW_US).
const sampleWindow = time.Second / 6

// slotPeriodFor is a whole fraction of the controller's period P (ns; P
// itself where shorter than slotPeriod) and of sampleWindow where one near
// slotPeriod is: each window then holds whole slot periods, and so does
// each device sample. A sample that holds part of one reads the tenants'
// bursts or the gap after them by its stamps' phase, which is the driver's
// own clock's: an unsaturated pair of 30 + 30 held by 50 ms slots read 28.0
// to 33.1 by phase on 100 ms samples of 1/6 s, simulated (33.1 on the fake
// driver, whose samples fall on whole periods like the slots).
func slotPeriodFor(P float64) float64 {
	n := max(math.Floor(P/float64(slotPeriod)), 1)
	for m := n; m <= n+n/2+1 && P/m >= float64(slotPeriod)/2; m++ {
		k := float64(sampleWindow) / (P / m)
		if math.Abs(k-math.Round(k)) <= 0.02 {
			return P / m
		}
	}
	return P / n
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
//
// With confine (every tenant active on the GPU is slotted: no one else's
// work to leave room for) the slots confine (api.Slot.Confine) and fill
// the period, each by its target or, where more, the part of the GPU its
// rate gives (fracs: the target and the integral's correction). Confined,
// a tenant gets no more GPU time than its slot: one whose work loses time
// to the others' (their queues running past their slots' end) is given a
// longer slot as its integral grows, not only more credit.
func assignSlots(ds []Decision, slotted map[string]bool, P float64, confine bool, fracs map[string]float64) {
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
	confine = confine && len(keys) == len(slotted)
	part := func(d Decision) float64 { return max(d.Share+d.Lent, 0) }
	if confine {
		part = func(d Decision) float64 { return max(fracs[d.Key], d.Share+d.Lent, 0) }
		sum = 0
		for _, i := range keys {
			sum += part(ds[i])
		}
		scale = 1 / sum
	}
	sp := uint32(slotPeriodFor(P) / 1000)
	var at uint32
	for _, i := range keys {
		n := uint32(math.Round(float64(sp) * part(ds[i]) * scale))
		n = min(max(n, 1), sp-at)
		ds[i].Control.Slot = api.Slot{PeriodUs: sp, StartUs: at, LenUs: n, Confine: confine}
		at += n
	}
}
