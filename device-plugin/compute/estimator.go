package compute

// estimator learns what a cost unit of each tenant's launches costs in GPU
// time (ns per unit). Launch costs are counted as blocks × warps, which is
// only a proxy: one tenant's unit may cost eight times another's. What the
// GPU-wide busy time can tell reliably:
//
//   - periods in which one tenant alone launched (and the GPU was not
//     saturated, so what was launched is what ran, give or take its queue)
//     give that tenant's cost: their busy time over their units. These solo
//     estimates are kept per tenant (soloCost).
//   - any unsaturated period gives the pooled cost: busy / all units. The
//     busy time of all periods that tenants with solo estimates do not
//     explain is shared by the others at one common cost (rest).
//
// Regression over mixed periods (regress) drifted apart for identical
// tenants in a steady closed loop; it is used only where the controller
// varies the tenants' rates against each other (excite.go) and nothing else
// gives a tenant's own cost.
type estimator struct {
	window        int
	obs           []observation // ring, newest last
	added         uint64        // windows added so far (observation.seq)
	solo          map[string]soloCost
	prev          string // the tenant that launched alone in the previous window, if any
	prevSaturated bool   // the previous window was saturated
}

// soloCost pools a tenant's solo windows: their busy time and units, each
// sum decayed by soloKeep a window, so that a program whose kernels change
// is followed. Their ratio, not an average of each window's ratio: a window
// at a limited rate reads what its launches cost plus its queue's change,
// and one tenant of 125 ns per unit alone at 60% read 176, 97 and 147 in its
// first three windows (fake driver); the sums cancel the queue's changes,
// an average keeps them.
type soloCost struct {
	busy, units float64
	n           int // solo windows seen; the estimate counts from minSolo on
}

type observation struct {
	busy      float64            // ns
	period    float64            // ns
	saturated bool               // busy (nearly) all period: work queued, launched ≠ ran
	units     map[string]float64 // per tenant
	// steady: every tenant that launched in it had been held to a rate for
	// a while. Not a start: no launches admitted before the first decision
	// (run, never charged), no queue of an unlimited tenant draining, no
	// busy time of work from before the controller, all of which a start's
	// windows count as the cost of its few charged units.
	steady bool
	// clean: the window lies within one phase of the excitation (or none
	// ran): the regression's rows (regress)
	clean bool
	phase uint64  // where clean: the excitation's phase it lies in (when its targets were set)
	clock float64 // the SM clock's mean over it, MHz (0: not read)
	seq   uint64  // its place among the windows added (consecutive windows: consecutive seq)
}

const (
	saturatedAt = 0.92 // busy fraction from which a period says nothing about cost per unit
	soloMinBusy = 0.05 // a solo period must show at least this much busy time
	soloKeep    = 0.9  // the weight a tenant's earlier solo windows keep at each new one
	minCost     = 0.05 // of the pooled cost: floor of any tenant's cost
	minSolo     = 5    // solo windows before a tenant's own cost is trusted (a start is noisy)
	minSettled  = 5    // unsaturated windows before the device-wide estimate is compared with measured costs
	startsOff   = 2    // a basis of starts this many times below the steady windows' cost is off (startsLevel)
)

func newEstimator(window int) *estimator {
	return &estimator{window: window, solo: map[string]soloCost{}}
}

// add records a window. steady are the tenants that have been held to a rate
// long enough for a solo window of theirs to say what their work costs (not
// in start-up, where launches come in bursts).
//
// A window before any of its tenants launched (none of those it remembers
// did) is left out: its busy time is no tenant's work, but a process
// that ended as they were listed (the previous row of the gpu check, a
// pod leaving), which samples that give no shares cannot tell from
// theirs. Counted, it stood in the basis as the cost of their first
// launches for the estimator's 60 windows: a PyTorch 30 + 60 listed
// while a solo PyTorch's last 0.9 of a window ran read 2360 ns per unit
// for about 970, then 1053 after 10 s, and its back-off swung the GPU in
// and out of saturation once a second (fake driver as the H200, the
// rehearsal; TestEstimatorBeforeLaunches).
func (e *estimator) add(busy, period float64, units map[string]float64, steady map[string]bool, clean bool, phase uint64, clock float64) {
	if !e.launched(units) {
		return
	}
	e.added++
	o := observation{busy: busy, period: period, saturated: busy >= saturatedAt*period, units: units, clean: clean, phase: phase, clock: clock, seq: e.added}
	for key, u := range units {
		if u > 0 {
			o.steady = steady[key]
			if !o.steady {
				break
			}
		}
	}
	e.obs = append(e.obs, o)
	if len(e.obs) > e.window {
		e.obs = e.obs[len(e.obs)-e.window:]
	}
	only, n := "", 0
	for key, u := range units {
		if u > 0 {
			only, n = key, n+1
		}
	}
	prev, prevSaturated := e.prev, e.prevSaturated
	e.prev, e.prevSaturated = "", o.saturated
	if n == 1 {
		e.prev = only
	}
	// A solo window counts when the tenant was alone in the one before too,
	// and the GPU not saturated in it: then no one else's queued work runs in
	// it, nor a backlog of its own (a neighbour's 0.5 s restart left a 60%
	// tenant's first solo window reading 176 ns per unit for a true 125, fake
	// driver), and it is not a start.
	if o.saturated || busy < soloMinBusy*period || n != 1 || prev != only || prevSaturated || !steady[only] {
		return
	}
	c := e.solo[only]
	c.busy = c.busy*soloKeep + busy
	c.units = c.units*soloKeep + units[only]
	c.n++
	e.solo[only] = c
}

// launched says whether a tenant launched in units or in a window it
// remembers.
func (e *estimator) launched(units map[string]float64) bool {
	for _, u := range units {
		if u > 0 {
			return true
		}
	}
	for _, o := range e.obs {
		for _, u := range o.units {
			if u > 0 {
				return true
			}
		}
	}
	return false
}

// settled says whether the device-wide estimate of steady windows (steady)
// rests on enough unsaturated windows to be compared with anything: the
// estimate of saturated windows alone counts queued launches as run (73 ns
// per unit against a true 125 at the start of a 30+60 pair, fake driver),
// and measured costs compared with it looked apart when they were not. Nor
// do a start's windows count: a balance tenant's first windows (busy time of
// its uncharged first launches, of work from before) put its cost at 177 ns
// per unit for 6 s, its measured 104 then stood apart, and a tenant of the
// same program joining later was split from it by their noisy measured costs
// (56.5 + 44.4 for 48.5 + 50, fake driver).
func (e *estimator) settled() bool {
	n := 0
	for _, o := range e.obs {
		if !o.saturated && o.steady {
			n++
		}
	}
	return n >= minSettled
}

// known is a tenant's own cost, once enough solo windows were seen.
func (e *estimator) known(key string) (float64, bool) {
	c := e.solo[key]
	if c.n < minSolo || c.units <= 0 {
		return 0, false
	}
	return c.busy / c.units, true
}

// forget drops a tenant that left, and its share of each window's busy
// time: split by units × cost (k, the costs the attribution used last), or
// the whole window where that cannot be split. Its units alone went before:
// the busy time they had cost stayed, as the others' (a pair starting as a
// 90% tenant left read 5716 ns per unit for a true 125, started at a
// fiftieth of its rate and held 9 + 18 for 30 + 60 once the controller
// stopped, simulated).
func (e *estimator) forget(key string, k map[string]float64) {
	delete(e.solo, key)
	if e.prev == key {
		e.prev = ""
	}
	for i := range e.obs {
		o := &e.obs[i]
		if u := o.units[key]; u > 0 {
			var sum float64
			for other, v := range o.units {
				sum += v * k[other]
			}
			if sum > 0 && k[key] > 0 {
				o.busy -= o.busy * u * k[key] / sum
			} else {
				o.busy, o.units = 0, nil
				continue
			}
		}
		delete(o.units, key)
		// a window only it launched in is no one's steady window now
		launched := false
		for _, v := range o.units {
			launched = launched || v > 0
		}
		o.steady = o.steady && launched
	}
}

// fit returns ns per unit by tenant; empty until busy time and units were seen.
func (e *estimator) fit(keys []string) map[string]float64 {
	return e.fitOver(keys, false)
}

// steady is fit over the steady windows only (empty without any): what
// measured costs are compared with once settled.
func (e *estimator) steady(keys []string) map[string]float64 {
	return e.fitOver(keys, true)
}

func (e *estimator) fitOver(keys []string, steadyOnly bool) map[string]float64 {
	startsOnly := e.startsOnly()
	var busy, known, unknown, all float64
	for _, o := range e.obs {
		if !counts(o, steadyOnly, startsOnly) {
			continue
		}
		busy += o.busy
		for key, u := range o.units {
			all += u
			if k, ok := e.known(key); ok {
				known += u * k
			} else {
				unknown += u
			}
		}
	}
	if steadyOnly && (busy <= 0 || all <= 0) {
		return map[string]float64{}
	}
	if busy <= 0 || all <= 0 { // only saturated periods so far: pool them
		for _, o := range e.obs {
			busy += o.busy
			for _, u := range o.units {
				all += u
			}
		}
		if busy <= 0 || all <= 0 {
			return map[string]float64{}
		}
		known, unknown = 0, all
		e.solo = map[string]soloCost{}
	}
	pooled := busy / all
	lv := e.levelOver(steadyOnly, startsOnly)
	rest := pooled
	if unknown > 0 && known > 0 {
		rest = max(e.rest(steadyOnly)/lv, minCost*pooled)
	}
	out := make(map[string]float64, len(keys))
	for _, key := range keys {
		if k, ok := e.known(key); ok {
			out[key] = max(k/lv, minCost*pooled)
		} else {
			out[key] = rest
		}
	}
	return out
}

// rest is the cost of the tenants whose own cost is not known, at the true
// level: the busy time of all windows (steadyOnly: all steady ones) that the
// known tenants' own costs do not explain, over the others' units. Not over
// the fit's basis: its unsaturated windows beside saturated ones read low
// (a window where less ran than was launched stays below saturation and
// counts, one where a backlog drained is saturated and does not; a pair of
// one program read 97-105 ns per unit for a true 125), and subtracted from
// them a known cost, exact from its solo windows, left the whole shortfall
// to the rest: a container restarting beside a neighbour (known at 126,
// alone in the gap) was costed 70-114 and ran 33-35 for 30 beside 55-57
// for 60 (fake driver). Across all windows what was launched and not run is
// bounded by the queue. 0 when no unknown tenant launched.
func (e *estimator) rest(steadyOnly bool) float64 {
	var busy, known, unknown float64
	for _, o := range e.obs {
		if !wide(o, steadyOnly) {
			continue
		}
		busy += o.busy
		for key, u := range o.units {
			if k, ok := e.known(key); ok {
				known += u * k
			} else {
				unknown += u
			}
		}
	}
	if unknown <= 0 {
		return 0
	}
	return (busy - known) / unknown
}

// wide says whether a window is among those a basis is compared with (its
// level, the rest's busy time): all of them, or the steady ones.
func wide(o observation, steadyOnly bool) bool {
	return o.steady || !steadyOnly
}
