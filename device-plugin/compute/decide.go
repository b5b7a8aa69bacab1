package compute

import (
	"math"

	"github.com/volcano-vgpu/volcano-vgpu/api"
)

// targets is each tenant's share this period. fixed: its share. balance:
// its share plus what active tenants leave idle, split by share. Best effort
// (no share asked): what active tenants with shares leave idle. Foreign load
// (a fraction of the GPU) comes off the headroom first: shares that no longer
// fit are scaled to what it leaves. lent is what the excitation lent each
// tenant over the period seen (excitation.lentAt).
func (g *GPU) targets(ts []TenantInput, foreign float64, lent map[string]float64) map[string]float64 {
	room := max(headroom-foreign, 0.05)
	out := make(map[string]float64, len(ts))
	var claimed, balance float64
	var bestEffort, active int
	for _, t := range ts {
		if g.tenants[t.Key].idle < activeAfter {
			active++
		}
	}
	for _, t := range ts {
		active := g.tenants[t.Key].idle < activeAfter
		switch {
		case t.Share >= 1:
			if active {
				bestEffort++
			}
		case active:
			claimed += t.Share
			if t.Policy == api.ComputeBalance {
				balance += t.Share
			}
		}
	}
	spare := max(room-claimed, 0) // lent out up to the headroom, never into saturation
	// A tenant with a share that gets less than it (by more than a point) is
	// held back by contention, not by its allowance: best-effort tenants give
	// way until it is served. What it lent others in the excitation's turn
	// is not held back (counted, it cost a best-effort tenant beside 30 + 50
	// a fifth of its share: 14.8 for 18.5, simulated).
	var shortfall float64
	for _, t := range ts {
		if st := g.tenants[t.Key]; t.Share < 1 && st.idle < activeAfter {
			shortfall += max(t.Share+lent[t.Key]-st.measured-0.01, 0)
		}
	}
	scale := 1.0
	if claimed > room {
		scale = room / claimed
	}
	for _, t := range ts {
		s := t.Share
		switch {
		case s >= 1:
			s = 1
			if claimed > 0 {
				s = max(spare-shortfall, 0.01) / float64(max(bestEffort, 1))
				if balance > 0 {
					s = 0 // balance tenants take the spare first
				}
			}
		case t.Policy == api.ComputeBalance && active == 1 && g.tenants[t.Key].idle < activeAfter:
			s = 1 // alone on the GPU: nobody to give way to
		case t.Policy == api.ComputeBalance && balance > 0 && bestEffort == 0:
			s += spare * t.Share / balance
		}
		if s < 1 {
			s *= scale
		}
		out[t.Key] = min(s, 1)
	}
	return out
}

// target is a tenant's share with what the excitation lends or borrows.
type target struct {
	now  float64 // from this decision on
	seen float64 // in force over the period seen
	// hold: the targets changed within the period (or just before it), so
	// it shows launches at two targets; it moves no integral. Compared with
	// the targets after the switch, periods seen late kicked the integrals
	// by the lent share at every switch (with samples 200 ms late an
	// 8x-apart pair joining late swung between 56% and 100% of the GPU
	// and got 26.8 + 56.5 for 30 + 60, simulated).
	hold bool
	// used: where the tenants' host stopped them for part of the window
	// (hostStall), the part of its rates' allowance the tenant launched;
	// its shortfall counts against its target over that part only. 0: no
	// stall
	used float64
}

// hostStall returns, where the window seen is a stall of the tenants'
// host, the part of what its rates allowed over the window that each
// limited tenant launched (nil where it is none): the GPU below
// saturation and every limited tenant launching under stallUsed of it.
// They stopped launching on their own for part of the window (a busy
// node, a host process between steps); the limiter held none of them
// back there, and what they did not get in that part is not the rates' to
// make up. Counted, the integrals paid it back as saturation: after the
// host stopped a PyTorch 30 + 60 for 300 ms the GPU stood saturated for 4
// s while both ran over (31.4 + 62.8 over the next 5 s, simulated H200),
// and after 200 ms it stood saturated for most of the next 5 s, or the
// back-off swung it in and out of saturation once a second, as on the
// fake driver as the H200 (docs/limiter-rehearsals.md). One tenant
// launching little beside another that launches its rate is no stall: a
// launch-bound tenant is held by a saturating one's queue. The rates are
// those in force over the window, not the newest: seen 200 ms late, a
// back-off letting go had doubled them.
func (g *GPU) hostStall(in Input, units map[string]float64, P float64) map[string]float64 {
	if in.Partial || in.BusyNs >= saturatedAt*P {
		return nil
	}
	end := float64(in.NowNs) - in.LagNs
	used := map[string]float64{}
	for _, t := range in.Tenants {
		st := g.tenants[t.Key]
		allowed := st.allowedOver(end-P, end)
		if st.unlimited || allowed <= 0 {
			continue
		}
		u := units[t.Key] / allowed
		if u >= stallUsed {
			return nil
		}
		used[t.Key] = u
	}
	if len(used) == 0 {
		return nil
	}
	return used
}

// rateAt is a rate a decision set, from its stamp.
type rateAt struct {
	from uint64
	rate float64
}

// rateHistory: how many of a tenant's decisions' rates it keeps, for
// windows seen that many periods late (allowedOver)
const rateHistory = 8

// setRate sets the tenant's rate from now on.
func (st *tenantState) setRate(now uint64, rate float64) {
	st.rate = rate
	st.rates = append(st.rates, rateAt{from: now, rate: rate})
	if len(st.rates) > rateHistory {
		st.rates = st.rates[len(st.rates)-rateHistory:]
	}
}

// allowedOver is the cost units the tenant's rates allowed from from to to
// (monotonic ns), as far as its rates reach back; 0 where they do not.
func (st *tenantState) allowedOver(from, to float64) float64 {
	if len(st.rates) == 0 || from < float64(st.rates[0].from) {
		return 0
	}
	var sum float64
	for i, r := range st.rates {
		lo, hi := max(from, float64(r.from)), to
		if i+1 < len(st.rates) {
			hi = min(to, float64(st.rates[i+1].from))
		}
		if hi > lo {
			sum += r.rate * (hi - lo)
		}
	}
	return sum
}

// decide sets a tenant's allowance.
func (g *GPU) decide(t TenantInput, st *tenantState, in Input, P, a, k, fk, share float64, tg target, throttled bool, backoff float64, slotted bool) api.ControlDevice {
	c := api.ControlDevice{StampNs: in.NowNs, PeriodUs: uint32(P / 1000)}
	// what the previous decision allowed up to now
	if in.NowNs > st.stamp {
		st.allowance += uint64(st.rate * float64(in.NowNs-st.stamp))
	}
	st.stamp = in.NowNs
	st.unlimited = t.Policy == api.ComputeNone || share >= 0.999
	if st.unlimited {
		c.Mode = api.ControlUnlimited
		st.integ = 0
		st.setRate(in.NowNs, 0)
		st.allowance = t.latest()
		c.Allowance = st.allowance
		if fk > 0 {
			c.Fallback = max(share, 0.01) / fk
		}
		return c
	}
	c.Mode = api.ControlLimited
	if k <= 0 { // nothing measured yet: a few launches per period, doubling while held back
		if throttled && st.boot < maxBoot {
			st.boot *= 2
		}
		st.setRate(in.NowNs, 0)
		st.allowance = t.latest() + st.boot
		c.Allowance = st.allowance
		return c
	}
	e := (tg.seen - a/P) * P
	if tg.used > 0 && e > 0 {
		e = max(tg.seen*tg.used-a/P, 0) * P
	}
	if !in.Partial && !tg.hold && float64(in.NowNs)-in.LagNs >= float64(g.reCostAt) && (e < 0 || throttled) {
		st.integ += e
	}
	lim := 3 * max(share, 0.02) * P
	st.integ = min(max(st.integ, -lim), lim)
	frac := max(tg.now+gain*st.integ/P, tg.now/8, 0.002)
	st.frac = frac
	rate := frac / k * backoff
	// the rate that holds the share, should the node stop answering: the
	// share at the estimated cost, averaged. Not the rates in force: while
	// the loop settles the GPU is often saturated, launches queue instead of
	// running, and the rates that held the share then were up to half as
	// high again as what the share needs once no one corrects them (a 30%
	// container ran at 41-44% after the controller died at 2.5 s, fake
	// driver). fk is measured (per-process samples) or the device-wide
	// estimate at its absolute level (estimator.level), so share/fk is the
	// launch rate that takes the share.
	st.periods++
	if st.periods <= settlePeriods || st.refit {
		st.fallback, st.refit = share/fk, false
	} else { // over about a second, whatever the driver's sampling period (100 ms on an H100, 200 on an H200)
		st.fallback += (1 - math.Exp(-P/fallbackTauNs)) * (share/fk - st.fallback)
	}
	st.setRate(in.NowNs, rate)
	// an idle tenant banks at most a fraction of a period, beyond its
	// newest reading: not beyond Launched, read at the edge of a late
	// window, which an active tenant is past already (at 100 ms late a
	// tenant was held below its rate every period: 90 ran at 79, 30+60 at
	// 26+53, simulated). A tenant with a slot banks what it gains while it
	// waits for it.
	bank := P * bankPeriods
	if slotted {
		bank = max(bank, slotPeriodFor(P))
	}
	st.allowance = min(st.allowance, t.latest()+uint64(rate*bank))
	c.Allowance, c.Rate = st.allowance, rate
	c.Fallback = st.fallback
	return c
}
