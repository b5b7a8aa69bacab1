package compute

import (
	"math"
	"testing"

	"github.com/volcano-vgpu/volcano-vgpu/api"
)

func TestTargets(t *testing.T) {
	fixed := func(k string, s float64) TenantInput {
		return TenantInput{Tenant: Tenant{Key: k, Share: s, Policy: api.ComputeFixed}}
	}
	balance := func(k string, s float64) TenantInput {
		return TenantInput{Tenant: Tenant{Key: k, Share: s, Policy: api.ComputeBalance}}
	}
	tests := []struct {
		name    string
		in      []TenantInput
		idle    map[string]bool // tenants that have not launched for a while
		measure map[string]float64
		want    map[string]float64
	}{
		{name: "fixed shares as asked", in: []TenantInput{fixed("a", 0.3), fixed("b", 0.6)},
			want: map[string]float64{"a": 0.3, "b": 0.6}},
		{name: "shares over the headroom are scaled", // 0.5+0.5 = 1 > 0.985
			in: []TenantInput{fixed("a", 0.5), fixed("b", 0.5)}, want: map[string]float64{"a": 0.4925, "b": 0.4925}},
		{name: "balance alone takes the GPU", in: []TenantInput{balance("a", 0.3), fixed("b", 0.5)}, idle: map[string]bool{"b": true},
			want: map[string]float64{"a": 1, "b": 0.5}},
		{name: "balance shares the spare up to the headroom", // 0.3 + (0.985 - 0.8)
			in: []TenantInput{balance("a", 0.3), fixed("b", 0.5)}, want: map[string]float64{"a": 0.485, "b": 0.5}},
		{name: "no share asked: what the shares leave", // 0.985 - 0.8
			in: []TenantInput{fixed("a", 0.3), fixed("b", 0.5), fixed("c", 1)}, want: map[string]float64{"a": 0.3, "b": 0.5, "c": 0.185}},
		{name: "no share asked gives way to a tenant short of its share", // b measured 0.40 of 0.50: 0.185 - (0.10 - 0.01)
			in: []TenantInput{fixed("a", 0.3), fixed("b", 0.5), fixed("c", 1)}, measure: map[string]float64{"a": 0.3, "b": 0.4},
			want: map[string]float64{"a": 0.3, "b": 0.5, "c": 0.095}},
		{name: "no share asked, alone: the GPU", in: []TenantInput{fixed("a", 0.3), fixed("c", 1)}, idle: map[string]bool{"a": true},
			want: map[string]float64{"a": 0.3, "c": 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewGPU()
			for _, ti := range tt.in {
				st := &tenantState{measured: ti.Share}
				if m, ok := tt.measure[ti.Key]; ok {
					st.measured = m
				}
				if tt.idle[ti.Key] {
					st.idle = activeAfter
				}
				g.tenants[ti.Key] = st
			}
			got := g.targets(tt.in, 0, nil)
			for k, w := range tt.want {
				if math.Abs(got[k]-w) > 1e-9 {
					t.Errorf("%s: target %v, want %v", k, got[k], w)
				}
			}
		})
	}
}

func TestEstimatorSoloCost(t *testing.T) {
	e := newEstimator(window)
	// a alone (three windows): 40 ms busy for 1000 units -> 40 µs/unit
	for range minSolo + 1 { // the first solo window only opens the run
		e.add(40e6, 100e6, map[string]float64{"a": 1000}, map[string]bool{"a": true}, true, 0, 0)
	}
	// both: 60 ms busy; a's 500 units explain 20 ms, b's 4000 units the other 40 -> 10 µs/unit
	e.add(60e6, 100e6, map[string]float64{"a": 500, "b": 4000}, nil, true, 0, 0)
	k := e.fit([]string{"a", "b"})
	if math.Abs(k["a"]-40e3) > 1e-6 || math.Abs(k["b"]-10e3) > 1e-6 {
		t.Errorf("costs %v, want a 40000 (alone), b 10000 (the rest)", k)
	}
}

// One program's windows beside saturated ones read low where they count
// (unsaturated: less ran than was launched) and high where they do not
// (saturated: the backlog drained). A known cost subtracted from the
// unsaturated ones alone left the whole shortfall to the rest (b at 7.5 µs
// per unit here for a true 10); across all windows the spill cancels.
func TestEstimatorRestOverAllWindows(t *testing.T) {
	e := newEstimator(window)
	for range minSolo + 1 { // a alone: 40 µs per unit
		e.add(40e6, 100e6, map[string]float64{"a": 1000}, map[string]bool{"a": true}, true, 0, 0)
	}
	if k, ok := e.known("a"); !ok || math.Abs(k-40e3) > 1e-6 {
		t.Fatalf("a's own cost %v (known %v), want 40000", k, ok)
	}
	for range 3 {
		// 60 ms launched, 50 ran; then 90 ms launched and 10 left over ran
		e.add(50e6, 100e6, map[string]float64{"a": 500, "b": 4000}, nil, true, 0, 0)
		e.add(100e6, 100e6, map[string]float64{"a": 500, "b": 7000}, nil, true, 0, 0)
	}
	k := e.fit([]string{"a", "b"})
	lv := e.level()
	if got := k["b"] * lv; math.Abs(got-10e3) > 1e-6 {
		t.Errorf("b's cost %.1f ns per unit at level %.3f, want 10000", got, lv)
	}
	if got := k["a"] * lv; math.Abs(got-40e3) > 1e-6 {
		t.Errorf("a's cost %.1f ns per unit at level %.3f, want 40000 (its own)", got, lv)
	}
}

func TestEstimatorLevel(t *testing.T) {
	e := newEstimator(window)
	// one program at 10 µs per unit. A saturated window launches 140 ms of
	// work: 40 ms of it queues and runs in the next window, beside 10 ms of
	// new launches. That window alone reads 50 µs per unit; all together
	// are exact.
	e.add(50e6, 100e6, map[string]float64{"a": 5000}, nil, true, 0, 0)
	e.add(100e6, 100e6, map[string]float64{"a": 14000}, nil, true, 0, 0)
	e.add(50e6, 100e6, map[string]float64{"a": 1000}, nil, true, 0, 0)
	k := e.fit([]string{"a"})["a"]
	if got := k * e.level(); math.Abs(got-10e3) > 1e-6 {
		t.Errorf("cost %v at level %v = %v, want 10000", k, e.level(), got)
	}
}

func TestStepChargesAJumpPastTheAllowanceAsAllowed(t *testing.T) {
	g := NewGPU()
	in := func(launched uint64, now uint64) Input {
		return Input{BusyNs: 50e6, PeriodNs: 100e6, NowNs: now,
			Tenants: []TenantInput{{Tenant: Tenant{Key: "a", Share: 0.3, Policy: api.ComputeFixed}, Report: Report{Launched: launched}}}}
	}
	g.Step(in(0, 1e9))
	g.Step(in(1000, 1.1e9))
	d := g.Step(in(1000+1<<40, 1.2e9)) // a forged report: 2^40 units in one period
	if d[0].Control.Mode != api.ControlLimited {
		t.Errorf("mode %v, want limited", d[0].Control.Mode)
	}
	if got := g.est.obs[len(g.est.obs)-1].units["a"]; got >= 1<<40 {
		t.Errorf("charged %v units for a forged jump, want what it was allowed", got)
	}
}

// TestStartWindowsDoNotSettleTheEstimate replays the start of a balance
// tenant as the fake driver showed it, then a tenant of the same program
// joining: the first window busy with work no unit was charged for (launches
// before the first decision, work from before), a boot window, then the
// balance tenant alone and unlimited (saturated), then the join. Per-process
// samples read a's cost 17% low and b's 20% high (within their noise; true
// 125 ns per unit). Counted as settled, the start windows put the device-wide
// cost near 240 ns, a's measured 104 stood apart from it, measured costs
// split the two (a 56.5 + b 44.4 for 48.5 + 50, fake driver).
func TestStartWindowsDoNotSettleTheEstimate(t *testing.T) {
	const P = 100e6
	g := NewGPU()
	a := Tenant{Key: "a", Share: 0.3, Policy: api.ComputeBalance}
	b := Tenant{Key: "b", Share: 0.5, Policy: api.ComputeFixed}
	var la, lb uint64 // launched counters
	var now uint64 = 1e9
	var spanBusy, spanA, spanB float64 // since the last measurement
	step := func(busy float64, ua, ub uint64, withB bool) []Decision {
		la, lb, now = la+ua, lb+ub, now+uint64(P)
		spanBusy, spanA, spanB = spanBusy+busy*P, spanA+float64(ua), spanB+float64(ub)
		in := Input{BusyNs: busy * P, PeriodNs: P, NowNs: now, Tenants: []TenantInput{{Tenant: a, Report: Report{Launched: la}}}}
		if withB {
			in.Tenants = append(in.Tenants, TenantInput{Tenant: b, Report: Report{Launched: lb}})
		}
		if g.period%10 == 9 { // a batch of per-process samples about once a second
			m := &Measurement{SpanNs: 10 * P, BusyNs: spanBusy, Tenants: map[string]Measured{
				"a": {BusyNs: 0.83 * 125 * spanA, Units: spanA}}}
			if withB && spanB > 0 {
				m.Tenants["b"] = Measured{BusyNs: 1.2 * 125 * spanB, Units: spanB}
			}
			in.Measurement = m
			spanBusy, spanA, spanB = 0, 0, 0
		}
		return g.Step(in)
	}
	step(0.89, 200000, 0, false) // launched before the first decision: not charged
	step(0.04, 48000, 0, false)
	for range 28 { // alone and unlimited: the GPU saturated
		step(1, 800000, 0, false)
	}
	step(0.88, 39952, 0, true) // b joins; a limited, its queue drains
	step(0.5, 0, 292271, true)
	step(0.68, 527959, 288644, true)
	for i := range 60 {
		busy, ua, ub := 1.0, uint64(460000), uint64(340000)
		if i%5 == 4 { // now and then a window with idle time
			busy, ua, ub = 0.9, 414000, 306000
		}
		for _, d := range step(busy, ua, ub, true) {
			if d.Calibrated {
				t.Fatalf("period %d: %s split by its measured cost %.0f (two tenants of one program, costs within the samples' noise)", g.period, d.Key, d.Cost)
			}
		}
	}
	if !g.est.settled() {
		t.Error("60 periods of two tenants held to their rates did not settle the estimate")
	}
}

// TestEstimatorForget: a tenant that leaves takes its share of each window's
// busy time with it, not only its units (left in, that time read as the
// others': a pair starting as a 90% tenant left read 5716 ns per unit for a
// true 125, simulated).
func TestEstimatorForget(t *testing.T) {
	tests := []struct {
		name string
		k    map[string]float64 // the costs the last attribution used
		want float64            // a's cost after x left (true 125)
	}{
		{name: "one program: split by units", k: map[string]float64{"a": 125, "x": 125}, want: 125},
		{name: "split by the costs at their level", k: map[string]float64{"a": 1, "x": 1}, want: 125},
		{name: "x's cost unknown: its windows go", k: map[string]float64{"a": 125}, want: 125},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEstimator(window)
			for range 5 { // x alone at 80%
				e.add(80e6, 100e6, map[string]float64{"x": 640000}, nil, true, 0, 0)
			}
			for range 5 { // x 40%, a 30%: 70% busy
				e.add(70e6, 100e6, map[string]float64{"x": 320000, "a": 240000}, nil, true, 0, 0)
			}
			e.forget("x", tt.k)
			for range 2 { // a alone, 30%
				e.add(30e6, 100e6, map[string]float64{"a": 240000}, nil, true, 0, 0)
			}
			got := e.fit([]string{"a"})["a"] * e.level()
			if math.Abs(got-tt.want) > 0.5 {
				t.Errorf("a's cost after x left: %.1f ns per unit, want %.0f", got, tt.want)
			}
		})
	}
}

// TestStepLateWindows: what a period seen late may and may not change.
func TestStepLateWindows(t *testing.T) {
	a := Tenant{Key: "a", Share: 0.3, Policy: api.ComputeFixed}
	step := func(g *GPU, i int, rep Report, partial bool) Decision {
		now := uint64(1e9 + i*100e6)
		return g.Step(Input{BusyNs: 30e6, PeriodNs: 100e6, NowNs: now, LagNs: 200e6, Partial: partial,
			Tenants: []TenantInput{{Tenant: a, Report: rep}}})[0]
	}
	settle := func() *GPU { // a at its share, 240000 units a period (125 ns each)
		g := NewGPU()
		for i := range 20 {
			n := uint64(i) * 240000
			step(g, i, Report{Launched: n, Latest: n + 480000}, false)
		}
		return g
	}
	t.Run("the bank counts from the newest reading", func(t *testing.T) {
		// a takes all it is allowed; the window's edge, 200 ms late, is two
		// periods of its launches behind its newest reading
		g := NewGPU()
		var allowed uint64
		for i := range 30 {
			latest := allowed
			d := step(g, i, Report{Launched: latest - min(latest, 480000), Latest: latest}, false)
			if i >= 10 && d.Control.Allowance < latest {
				t.Fatalf("period %d: allowance %d below a's newest reading %d: each decision takes back what the last gave", i, d.Control.Allowance, latest)
			}
			allowed = d.Control.Allowance + uint64(d.Control.Rate*100e6)
		}
	})
	t.Run("a partial window teaches nothing", func(t *testing.T) {
		g := settle()
		n := len(g.est.obs)
		integ := g.tenants["a"].integ
		// the last work of a tenant gone: the GPU 90% busy, a charged as usual
		g.Step(Input{BusyNs: 90e6, PeriodNs: 100e6, NowNs: 3e9, LagNs: 200e6, Partial: true,
			Tenants: []TenantInput{{Tenant: a, Report: Report{Launched: 20 * 240000, Latest: 22 * 240000}}}})
		if len(g.est.obs) != n {
			t.Errorf("the estimator took a partial window (%d windows, had %d)", len(g.est.obs), n)
		}
		if got := g.tenants["a"].integ; got != integ {
			t.Errorf("a partial window moved the integral: %v, was %v", got, integ)
		}
	})
	t.Run("a window lost to a rewind is charged as allowed", func(t *testing.T) {
		g := settle()
		step(g, 20, Report{Launched: 100, Latest: 200}, false) // the rewind itself
		rate := g.tenants["a"].rate                            // in force over the next period
		d := step(g, 21, Report{Launched: 100, Latest: 240100, Lost: true}, false)
		if want := rate * 100e6; math.Abs(d.Units-want) > 1 {
			t.Errorf("charged %.0f units for a window lost to the rewind, want what it was allowed (%.0f)", d.Units, want)
		}
	})
}

func TestCostMoved(t *testing.T) {
	tests := []struct {
		name    string
		k, last map[string]float64
		want    bool
	}{
		{name: "a sliver's cost comes down from the floor", k: map[string]float64{"a": 700, "b": 1.4}, last: map[string]float64{"a": 720, "b": 40}, want: true},
		{name: "a cost doubles", k: map[string]float64{"a": 1400, "b": 0.14}, last: map[string]float64{"a": 700, "b": 0.14}, want: true},
		{name: "the fit's drift", k: map[string]float64{"a": 700, "b": 0.16}, last: map[string]float64{"a": 660, "b": 0.14}},
		{name: "a tenant new to the costs", k: map[string]float64{"a": 700, "b": 0.14}, last: map[string]float64{"a": 700}},
		{name: "no costs before", k: map[string]float64{"a": 700}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := costMoved(tt.k, tt.last); got != tt.want {
				t.Errorf("costMoved = %v, want %v", got, tt.want)
			}
		})
	}
}
