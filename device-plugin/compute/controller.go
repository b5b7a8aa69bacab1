package compute

import (
	"math"
	"sort"

	"github.com/volcano-vgpu/volcano-vgpu/api"
)

// Tunables of the loop.
const (
	gain          = 0.3     // integral gain per period
	costMoves     = 2.0     // a cost moved this many times over resets the integrals (costMoved)
	bankPeriods   = 0.25    // credit an idle tenant may bank, in periods of its rate
	bootUnits     = 1 << 16 // cost units a tenant may launch before anything is known
	maxBoot       = 1 << 24
	settlePeriods = 10
	fallbackTauNs = 1e9 // time constant of the fallback rate's average
	window        = 60  // periods the estimator remembers
	activeAfter   = 3   // periods a tenant counts as active after it last launched
	// headroom: the active tenants' shares are scaled to at most this much of
	// the GPU. A saturated GPU queues work, and a period in which launched work
	// is not the work that ran says nothing about what a tenant's work costs.
	headroom = 0.985
	// backoffRoom: while the tenants share one pooled cost on a GPU whose
	// per-process samples give no shares (the fit over the turns has not
	// split them yet) and that cost rests on unsaturated windows
	// (estimator.settled), the back-off (GPU.saturated) acts only where the
	// active shares leave at least this much of the GPU below saturatedAt.
	// Closer, a saturated window is the loop's own overshoot, which the
	// integrals take back (the measured shares sum to the busy time); the
	// back-off, deepening while the queues drained and let go at once, set
	// up a limit cycle: a cheap 30 beside a dear 60 swung between 55% and
	// 100% busy every 1.2 s on the fake driver clocked as a power-capped
	// H200 (the plant's gain near 90% busy is 1.7 times the nominal), and
	// in the simulation with samples 200 ms late. Busy time swinging that
	// much is noise the fit cannot see through, and it never split them
	// (5.5 + 86.2 in the rehearsal; simulated 16.8 + 68.2). Elsewhere the
	// back-off stays: at a start the costs come from saturated windows (half
	// the true cost, counting queued launches as run), and after a split
	// the rates of the new costs may overshoot for seconds; without the
	// back-off there a pair at 30 + 60 on a loaded machine stayed saturated
	// for 3 s and read 28.2 + 56.3 (fake driver), and GEMM 30 + elementwise
	// 60 with samples 200 ms late 30.4 + 65.8 (simulated).
	backoffRoom = 0.1
	// stallUsed: a window in which every limited tenant launched under this
	// much of what its rates allowed, the GPU below saturation, is a stall of
	// their host (hostStall)
	stallUsed = 0.8
)

type tenantState struct {
	lastLaunched, lastWaits uint64
	allowance               uint64
	rate                    float64
	stamp                   uint64
	integ                   float64 // integral of the share error, ns
	frac                    float64 // the part of the GPU its rate gives (the target and the integral's correction)
	boot                    uint64
	idle                    int // periods since it last launched
	seen                    bool
	measured                float64 // EWMA of the attributed busy fraction
	fallback                float64 // EWMA of the rate that holds the share (not the lent one)
	refit                   bool    // the costs it rested on were dropped: start it anew
	periods                 int     // periods with a cost estimate
	unlimited               bool    // the last decision let it launch freely
	cal                     calibration
	rewinds                 uint64
	lastCharge              uint64   // units charged in the previous period
	rewoundAt               uint64   // the period of the last rewind
	rates                   []rateAt // the rates of its last decisions (allowedOver)
}

// GPU is the controller of one GPU. Not safe for concurrent use.
type GPU struct {
	tenants    map[string]*tenantState
	unconfined bool // slots never confine (Runner.Unconfined)
	est        *estimator
	period     uint64
	// recorded: the launches are a recording's charged units (a replay of a
	// card's periods, open loop), not a limiter's under these decisions:
	// none is clipped to the allowance this controller gave
	recorded bool
	// saturated counts consecutive periods the GPU was busy throughout although
	// the active shares leave room: the attribution is then off (work queues),
	// and every limited tenant backs off until the GPU shows idle time again.
	saturated int
	lastK     map[string]float64 // the costs the last attribution used
	// backedAt: when the back-off last deepened. A window that ended before
	// it shows launches made before it: with late samples the back-off held
	// deepening on them for periods after the GPU had gone idle, then the
	// rates swung back (a limit cycle: 30+60 got 23+40 at 200 ms late,
	// simulated). Such a window holds the back-off where it is.
	backedAt uint64
	foreign  foreign
	measured bool // attribution by measured costs (calibration.apart)
	ex       excitation
	// regressed: the costs come from the fit over the excitation's windows
	// (estimator.regress; Fitted)
	regressed bool
	reCostAt  uint64 // NowNs the costs' basis last changed
}

// Foreign is the fraction of the GPU (0..1) taken by work no tenant's
// per-process samples explain: processes no tenant owns, and device busy
// time beyond what every sample explains. It shrinks the headroom the
// tenants share and is never charged to them. 0 without measurements.
func (g *GPU) Foreign() float64 {
	return g.foreign.fraction()
}

// Fitted says whether the tenants' costs come from the fit over the
// excitation's windows: a GPU whose per-process samples give no shares,
// with tenants of different programs.
func (g *GPU) Fitted() bool {
	return g.regressed
}

// NewGPU returns a controller with no history.
func NewGPU() *GPU {
	return &GPU{tenants: map[string]*tenantState{}, est: newEstimator(window)}
}

// Step runs one period: attributes the GPU's busy time to the tenants by what
// they launched, updates their allowances and returns one decision per input
// tenant, in input order. Tenants missing from in are forgotten.
func (g *GPU) Step(in Input) []Decision {
	g.period++
	P := max(in.PeriodNs, 1)
	present := map[string]bool{}
	units := map[string]float64{}
	keys := make([]string, 0, len(in.Tenants))
	for _, t := range in.Tenants {
		present[t.Key] = true
		keys = append(keys, t.Key)
		st := g.tenants[t.Key]
		if st == nil {
			st = &tenantState{boot: bootUnits, stamp: in.NowNs}
			g.tenants[t.Key] = st
		}
		var x uint64
		switch {
		case !st.seen:
			// what it launched before the first decision (libvcuda's boot
			// launches) is spent: the allowance starts from its newest
			// reading, not from the late window's edge (that left a lone 10%
			// tenant in debt it never paid off at its rate: starved, simulated
			// and fake driver)
			st.allowance = t.latest()
		case t.Lost && t.Launched >= st.lastLaunched:
			// a window before the rewind, seen late: what the tenant launched
			// in it went with the old counter; charged as what it was
			// allowed, as the rewind itself is (else its work there, seen
			// as nobody's, was charged to the others: a rewinding tenant
			// gained 6-7 points at 150 ms late samples, simulated)
			x = uint64(st.rate * P)
			if st.unlimited {
				x = st.lastCharge
			}
		case t.Launched >= st.lastLaunched:
			x = t.Launched - st.lastLaunched
			// An honest limiter never launches past its allowance by more than
			// the bank: a larger jump is charged as what it was allowed. Not
			// right after a rewind: what a rewound counter let the tenant
			// launch (local credit it had) ran on the GPU, and is its own.
			rewound := st.rewinds > 0 && g.period <= st.rewoundAt+activeAfter
			if lim := st.allowance + uint64(st.rate*P*2) + st.boot; !st.unlimited && !rewound && !g.recorded && t.Launched > lim && lim > st.lastLaunched {
				x = lim - st.lastLaunched
			}
		default:
			// The counter went backwards: a tenant rewinding its report (or a
			// report file created anew). An error, charged as what it was
			// allowed this period, never as a fresh start at no cost; the
			// allowance continues from the new counter.
			x = uint64(st.rate*P) + st.boot
			if st.unlimited {
				x = st.lastCharge
			}
			st.allowance = t.latest()
			st.rewinds++
			st.rewoundAt = g.period
		}
		st.lastCharge = x
		st.seen = true
		units[t.Key] = float64(x)
		if x > 0 {
			st.idle = 0
		} else {
			st.idle++
		}
	}
	for key := range g.tenants {
		if !present[key] {
			delete(g.tenants, key)
			g.est.forget(key, g.lastK)
		}
	}
	sort.Strings(keys)
	steady := map[string]bool{}
	for _, key := range keys {
		steady[key] = g.tenants[key].periods > settlePeriods
	}
	// clean: the excitation did not change the targets within the period
	// (nor just before it), so what it shows was launched at one set of
	// them
	end := float64(in.NowNs) - in.LagNs
	clean := g.ex.clean(end-P, end)
	if !in.Partial {
		g.est.add(in.BusyNs, P, units, steady, clean, g.ex.phaseAt(end), in.ClockMHz)
	}
	k := g.est.fit(keys)
	if in.Unshared || g.measured {
		// the fit's costs once two stand apart, for as long as they stay
		// well determined
		rk, apart := g.est.regress(keys)
		was := g.regressed
		g.regressed = apart || (g.regressed && rk != nil)
		for key, c := range rk {
			if g.regressed {
				k[key] = c
			}
		}
		if g.regressed != was || g.regressed && costMoved(k, g.lastK) {
			// the integrals made up for the old costs' error: with the
			// fit's costs they overshot (an 8x-apart pair joining late
			// dropped to 21% of the GPU for a second, simulated); and
			// windows seen after the change, late, show the rates of the
			// old costs: they move no integral (reCostAt). So too where
			// the fit's costs move several-fold after the split (costMoved)
			for _, st := range g.tenants {
				st.integ = 0
			}
			g.reCostAt = in.NowNs
		}
	} else {
		g.regressed = false
	}
	g.learn(in)
	// Measured costs replace the device-wide ones once one tenant's stands
	// apart from its device-wide cost by more than the samples' noise (then
	// for good, and for every tenant measured: one basis for the split). While
	// the device-wide estimate rests on saturated windows only (it counts
	// queued launches as run) the measured costs are compared with their own
	// pooled average instead: compared with such an estimate (73 ns per unit
	// against a true 125), two tenants of one program looked apart, and their
	// noisy measured costs (200 and 160) split the GPU 24 + 60 for 30 + 60
	// (fake driver).
	settled := g.est.settled()
	var steadyK map[string]float64
	if settled {
		steadyK = g.est.steady(keys)
	}
	var pooledNs, pooledUnits float64
	for _, key := range keys {
		pooledNs += g.tenants[key].cal.ns
		pooledUnits += g.tenants[key].cal.units
	}
	for _, key := range keys {
		ref := steadyK[key]
		if !settled {
			ref = 0
			if pooledUnits > 0 {
				ref = pooledNs / pooledUnits
			}
		}
		g.measured = g.measured || g.tenants[key].cal.apart(ref)
	}
	calibrated := map[string]bool{}
	own := map[string]float64{} // measured costs at their absolute level, for the fallback rates
	for _, key := range keys {
		// not where samples give no shares: what they teach there comes
		// from rounds in which one tenant launched, whose sample may hold
		// another's queued work (an elementwise program read 6.7 ns per
		// unit for a true 3.75, and got 67.5 for 60 beside a GEMM,
		// simulated); the fit over the excitation's windows rules there.
		// Where they are shares the fit rules too once it tells the
		// tenants apart (regressed): the samples, one a second off by up
		// to 20 points, put an elementwise 30 beside a GEMM 60 1.5 points
		// off on average over 20 s runs (40 seeds, 5 beyond ± 3, max
		// 5.6), the fit over the device's busy time 0.2 (max 0.6,
		// simulated). The fallback rates stay on the measured costs (the
		// fit's, early, left the pair at 34.6 + 65.4 once the node
		// stopped answering at 5 s).
		if c, ok := g.tenants[key].cal.cost(); ok && g.measured && !in.Unshared {
			own[key] = c
			if !g.regressed {
				k[key], calibrated[key] = c, true
			}
		}
	}
	g.lastK = k
	foreign := g.Foreign()

	// attribution: the busy time foreign load leaves, split by units
	// weighted by each tenant's ns per unit
	tenantBusy := max(in.BusyNs-foreign*P, 0)
	var sum float64
	for _, key := range keys {
		sum += units[key] * k[key]
	}
	// the targets in force over the period (seen late: perhaps those of an
	// earlier phase)
	lent := g.ex.lentAt(end)
	shares := g.targets(in.Tenants, foreign, lent)
	slotted := g.slotted(in.Tenants, shares)
	// every active tenant's target, lent capacity and best effort
	// included: a GPU they are meant to fill is saturated by design, not
	// because the attribution is off (a best-effort tenant filling it set
	// the back-off swinging, and got 14-15 for 18.5 with samples 100 ms late,
	// simulated)
	var claimed float64
	for _, t := range in.Tenants {
		if g.tenants[t.Key].idle < activeAfter {
			claimed += shares[t.Key]
		}
	}
	switch {
	case in.Partial: // says nothing about the tenants: the back-off holds
	case in.BusyNs >= saturatedAt*P && claimed+foreign < saturatedAt:
		if g.saturated == 0 || float64(in.NowNs)-in.LagNs >= float64(g.backedAt) {
			g.saturated++
			g.backedAt = in.NowNs
		}
	default:
		g.saturated = 0
	}
	backoff := 1.0
	overshoot := claimed+foreign >= saturatedAt-backoffRoom && in.Unshared && !g.regressed && g.est.settled()
	for i := 1; i < g.saturated && backoff > 0.3 && !overshoot; i++ {
		backoff *= 0.85
	}
	level, starts := g.est.level(), g.est.startsLevel()
	var eligible []string
	asked := make(map[string]float64, len(in.Tenants))
	for _, t := range in.Tenants {
		if g.tenants[t.Key].idle < activeAfter && excitable(t, shares[t.Key]) {
			eligible = append(eligible, t.Key)
			asked[t.Key] = t.Share
		}
	}
	stall := g.hostStall(in, units, P)
	lend := g.ex.step(in.NowNs, (in.Unshared || g.measured) && !in.Partial, asked, eligible)
	out := make([]Decision, 0, len(in.Tenants))
	for _, t := range in.Tenants {
		st := g.tenants[t.Key]
		a := 0.0
		if sum > 0 {
			a = tenantBusy * units[t.Key] * k[t.Key] / sum
		}
		st.measured += 0.3 * (a/P - st.measured)
		// held back: a launch waited since, or one waits now (counted before
		// it waits, so the newest reading is past what was allowed)
		throttled := t.Waits != st.lastWaits || t.latest() > st.allowance
		st.lastWaits, st.lastLaunched = t.Waits, t.Launched
		d := Decision{Key: t.Key, Share: shares[t.Key], Measured: a / P, Cost: k[t.Key],
			Calibrated: calibrated[t.Key], Rewinds: st.rewinds, Units: units[t.Key]}
		fk := k[t.Key] // the cost at its absolute level, for the fallback rate
		if c, ok := own[t.Key]; ok {
			fk = c
		} else {
			fk *= level
		}
		d.Lent = lend[t.Key]
		tg := target{now: d.Share + lend[t.Key], seen: d.Share + lent[t.Key], hold: !clean, used: stall[t.Key]}
		rk := k[t.Key] // the cost the rate is set at
		if !calibrated[t.Key] && !g.regressed {
			rk *= starts
		}
		d.Control = g.decide(t, st, in, P, a, rk, fk, d.Share, tg, throttled, backoff, slotted[t.Key])
		if d.Control.Mode == api.ControlLimited {
			d.Control.Cost = rk // for the limiter's queue in a confining slot
		}
		out = append(out, d)
	}
	active := 0
	for _, t := range in.Tenants {
		if g.tenants[t.Key].idle < activeAfter {
			active++
		}
	}
	// every active tenant held to a rate: their slots confine
	confine := active == len(slotted) && foreign < confineForeign && !g.unconfined
	fracs := make(map[string]float64, len(out))
	for _, d := range out {
		fracs[d.Key] = g.tenants[d.Key].frac
	}
	assignSlots(out, slotted, P, confine, fracs)
	return out
}

// costMoved says whether a tenant's cost in k stands costMoves times or
// more from its cost in last. A tenant split off as a sliver is taken at
// the floor, a twentieth of the pooled cost, and the fit's next costs
// bring it down to its own as it launches more: a probe beside PyTorch
// went from 40 ns per unit to 1.4 and 0.17 within a second (0.14 its own,
// simulated H200). Its rates lagged its costs meanwhile, it was held
// below its share by its allowance, and its integral wound up to the
// limit; from there it ran over its share for seconds while the integral
// came down (63.7 for 60 beside a PyTorch 30 with 128 matmuls queued).
func costMoved(k, last map[string]float64) bool {
	for key, c := range k {
		if l := last[key]; l > 0 && c > 0 && math.Abs(math.Log(c/l)) >= math.Log(costMoves) {
			return true
		}
	}
	return false
}
