package compute

import "math"

// Regression over mixed windows: busy = Σ cost_i × units_i. In a steady
// closed loop every tenant launches at a near constant rate, so the units
// of different tenants rise and fall together and the fit cannot tell their
// costs apart (it drifted apart for identical tenants, fake driver). Where
// nothing else gives a tenant's own cost (per-process samples that are not
// shares, or none: Input.Unshared) the controller varies the tenants' rates
// against each other (excitation, excite.go), and then the fit is well
// posed.

// Regression tunables. regressSigmas is 4, not 3: the fit is tried every
// period over windows that overlap the last fit's, on several pairs at once,
// and a window's error is not independent of its neighbours' (queued work
// runs across a window's edge), so a split once made stays on chance
// alone: three tenants of one program stood 3.1 standard errors apart in 15
// windows of a loop swinging into saturation (20 + 30 + 40 got 19.7 + 33.8 +
// 35.5 with samples 200 ms late; a 50 + 50 pair 3.7 off, simulated). The
// different programs the fit is for stood 4.8 to 250 apart when first split
// (19 runs of the simulation's suites).
const (
	regressMinPer = 4    // windows per fitted cost, at least
	regressMinN   = 8    // windows, at least
	regressMaxRel = 0.5  // a cost's standard error, relative, beyond which the fit says nothing
	regressSigmas = 4.0  // how far apart two costs must stand (standard errors; see above)
	regressApart  = 0.05 // and by how much, relative: closer, tenants share the pooled cost (exact for one program)
	regressNoise  = 0.01 // of a window: the busy time's noise, at least (whole percents, queues)
	regressSliver = 0.5  // of the pooled cost: a poorly determined cost whose upper bound stands below it is a sliver's
	regressFar    = 4.0  // costs this far apart (ratio) may be split by the drained rows alone (see regress)
	// regressExplains: and where they explain the windows as seen, their
	// squared residuals at most this fraction of one pooled cost's (see regress)
	regressExplains = 0.5
	regressFill     = 0.3  // of a window: the other windows' fit missing it by more, a queue filled or drained in it (leaveOutFills)
	regressOver     = 1.5  // of the windows' busy time: more, and a tenant's cost says it ran longer than the GPU was busy (see fitRows)
	regressStall    = 0.5  // of each tenant's usual rate in its phase: every one launching less, the window is a stall (stalls)
	clockRecent     = 20   // windows: the newest this many's SM clocks are the clocks the fit is for (nearClock)
	clockBand       = 0.15 // of those: a window clocked further outside their range is left out (nearClock)
	clockSwing      = 0.03 // ln(highest/lowest) of the windows' SM clocks from which the fit reads each tenant's power of the clock (clockCosts)
	clockMaxRel     = 0.1  // a cost's standard error there, relative, beyond which it says nothing
	clockPowerSlack = 0.5  // a power of the clock this far outside [0, 1] is not a kernel's: the model does not hold
)

// regress fits each launching tenant's cost per unit over the clean windows
// (steady, within one phase of the excitation). Saturated windows count:
// what a tenant launched and did not run yet is bounded by its queue (a
// launch blocks while it is full), so over the fit's windows launched is
// what ran, and a saturated GPU whose split is wrong (a GEMM beside an
// elementwise program, sharing one pooled cost: 99.9 + 0.1 for 50 + 50,
// simulated) gives no unsaturated window to learn from. apart is true
// when every fitted cost is well determined (or a sliver's) and two of them
// stand apart; otherwise the pooled estimate (fit) stays, exact for tenants
// of one program, which the fit's noise would split. costs is nil when a
// cost is not well determined (apart is then false).
//
// A split that saturated windows carry must hold when the turns alone tell
// the costs (confirmed): in a saturated window a tenant whose launches
// block on its full queue launched what ran plus its queue's change, and
// least squares takes that noise in the units for a cost (errors in the
// regressor: two tenants of one program on a saturated GPU, one held by its
// rate, the other's units swinging ±15% with 20 ms queued, read 255 and 6.4
// ns per unit for a true 128 and the second was taken for a sliver: 51.5 +
// 44.5 for 50 + 50, simulated). Within a phase that noise and a genuine
// mix's own variation look alike (an elementwise tenant's kernels coming
// now and then beside a GEMM that fills the GPU); across phases the queues'
// changes cancel (they are bounded) while the turns move the tenants'
// rates.
//
// The costs come from the drained rows (drained: each saturated run joined
// to the window that ends it, over which what was launched ran) wherever
// those determine them: on the fake driver clocked as an H200 the windows
// as seen read a cheap tenant's cost 7% low beside a dear one's 6% high
// (32.3 + 55.5 of the GPU for 30 + 60). The split itself stands on the
// windows as seen, as before, or on the drained rows alone where they put
// the costs at least regressFar apart: they tell an 8x-apart pair apart
// seconds sooner (their noise is a fraction of the windows'), while a
// joined row holds a queue's worth of error where a run began with work
// queued, weighs as much as its windows together, and split one program's
// 45 + 45 at 191 against 57 ns per unit (3.3 apart, simulated, 150 ms
// late). Simulated sweep (TestSimSplitSweep, 36 runs a mix, 40 us
// switches): a cheap 30 beside a dear 60 split at 5.19 s on average, the
// last at 6.62 s (was 6.06 and 9.00), misses 1 (was 2); dear 30 + cheap 60
// 0 (was 3); no one-program pair split that did not before.
//
// Such a split must also explain the windows as seen (explains): a real
// H200 (2026-11-29) swung two PyTorch tenants of one program at 30 + 60 in
// and out of saturation (every 0.8 s a window 64-71% busy, the 60 launching
// a quarter less; the 30 held at its rate), and their drained rows put them
// 7 times apart (2649 and 381 ns per unit) while the windows as seen said
// nothing: they got 25.3 + 66.0. Those costs left 86% of one pooled cost's
// squared residuals in the windows; a genuine 8x-apart pair's (200 us
// kernels beside 2 ms ones, simulated) left 19%. Its recorded periods
// replay through the controller (TestReplayH200); without the drained rows
// the simulated pair got 25.6 for 30 over 40 s.
//
// The windows at a clock the loop has left are left out where those near
// the newest clocks determine the costs (nearClock), and where the clock
// swings the split's costs come from a fit of each tenant's power of the
// clock (clockCosts): atMeanClock takes every kernel's time as going with
// the inverse of the clock, and a memory-bound tenant's does not. Before
// all of that, a window the others' fit misses by more than 30% of it (a
// deep queue filled or a backlog ran there) is left out (leaveOutFills).
func (e *estimator) regress(keys []string) (costs map[string]float64, apart bool) {
	var rows []observation
	stalled := stalls(e.obs)
	for _, o := range e.obs {
		if o.steady && o.clean && o.busy > 0 && !stalled[o.seq] {
			rows = append(rows, o)
		}
	}
	rows = leaveOutFills(keys, rows)
	costs, apart = fitWindows(keys, rows)
	if near := nearClock(rows); len(near) < len(rows) {
		if nc, nApart := fitWindows(keys, near); nc != nil {
			costs, apart = nc, apart || nApart
		}
	}
	return costs, apart
}

// fitWindows fits the costs over rows (regress): the windows as seen and
// the drained rows, at the rows' mean clock.
func fitWindows(keys []string, rows []observation) (costs map[string]float64, apart bool) {
	saturated := anySaturated(rows)
	raw := rows
	rows = atMeanClock(rows)
	costs, apart = fitRows(keys, rows, rows)
	if apart && saturated {
		_, apart = fitRows(keys, phaseMeans(rows), rows)
		apart = apart && overIdentified(rows)
	}
	d := drained(rows)
	dc, dApart := fitRows(keys, d, d)
	if dApart && anySaturated(d) {
		_, dApart = fitRows(keys, phaseMeans(d), d)
		dApart = dApart && overIdentified(d)
	}
	if dc != nil {
		costs = dc
	}
	apart = apart || dApart && spread(dc) >= regressFar && explains(dc, rows) <= regressExplains
	if apart {
		over := raw
		if dc != nil {
			over = drained(raw)
		}
		if cc := clockCosts(keys, over); cc != nil {
			costs = cc
		}
	}
	return costs, apart
}

// normalEquations are least squares' normal equations: a = Σ x·xᵀ, b = Σ x·y.
type normalEquations struct {
	a [][]float64
	b []float64
}

func newNormal(m int) *normalEquations {
	q := &normalEquations{a: make([][]float64, m), b: make([]float64, m)}
	for i := range q.a {
		q.a[i] = make([]float64, m)
	}
	return q
}

func (q *normalEquations) add(x []float64, y float64) {
	for i := range x {
		q.b[i] += x[i] * y
		for j := range x {
			q.a[i][j] += x[i] * x[j]
		}
	}
}

// solve returns the least-squares coefficients and the inverse of a (the
// coefficients' covariance over the noise's variance).
func (q *normalEquations) solve() (beta []float64, inv [][]float64, ok bool) {
	inv, ok = invert(q.a)
	if !ok {
		return nil, nil, false
	}
	beta = make([]float64, len(q.b))
	for i := range beta {
		for j := range q.b {
			beta[i] += inv[i][j] * q.b[j]
		}
	}
	return beta, inv, true
}

// explains is the residual sum of squares of the windows as seen (rows)
// under costs, over that under one pooled cost: how much of what the busy
// time did the costs explain that one cost for all does not.
func explains(costs map[string]float64, rows []observation) float64 {
	var busy, units float64
	for _, o := range rows {
		busy += o.busy
		for _, u := range o.units {
			units += u
		}
	}
	if units <= 0 {
		return 1
	}
	pooled := busy / units
	var split, one float64
	for _, o := range rows {
		var s, p float64
		for key, u := range o.units {
			s += costs[key] * u
			p += pooled * u
		}
		split += (o.busy - s) * (o.busy - s)
		one += (o.busy - p) * (o.busy - p)
	}
	if one <= 0 {
		return 1
	}
	return split / one
}

// fitRows fits the costs over rows, the busy time's noise read from the
// residuals of resid (the rows as seen, where rows holds their units at
// their phase's means: those of an instrumental-variable fit).
func fitRows(keys []string, rows, resid []observation) (costs map[string]float64, apart bool) {
	cols, scale := columns(keys, rows)
	m, n := len(cols), len(rows)
	if m < 2 || n < max(regressMinN, regressMinPer*m) {
		return nil, false
	}
	// normal equations of the columns scaled to their mean (units differ by
	// orders of magnitude between programs)
	q := newNormal(m)
	x := make([]float64, m)
	for _, o := range rows {
		for i, key := range cols {
			x[i] = o.units[key] / scale[key]
		}
		q.add(x, o.busy)
	}
	beta, inv, ok := q.solve()
	if !ok {
		return nil, false
	}
	var rss, busy, units, period float64
	for _, o := range resid {
		period += o.period
		r := o.busy
		for i, key := range cols {
			r -= beta[i] * o.units[key] / scale[key]
			units += o.units[key]
		}
		rss += r * r
		busy += o.busy
	}
	// at least the busy time's own noise: a saturated window reads 100%
	// whatever ran, and a fit of tenants whose queues split a saturated GPU
	// (units that do not move with the excitation) is exact and says
	// nothing (two tenants of one program read 250 and 6.3 ns per unit for
	// a true 125, simulated)
	s2 := max(rss/float64(n-m), math.Pow(regressNoise*period/float64(n), 2))
	pooled := busy / units
	out := make(map[string]float64, m)
	sliver := false
	for i, key := range cols {
		// A sliver: a tenant held to a rate for a pooled cost many times
		// its own does a sliver of the GPU's work (an elementwise program
		// beside a GEMM: a thousand times, and 0.1% of the GPU), and the
		// busy time cannot tell its cost well; but even its upper bound
		// stands far below the pooled cost. It is taken at its estimate (at
		// least the floor): given more rate, it launches more, and the next
		// fits see it.
		raw := beta[i] / scale[key]
		// No tenant ran longer than the GPU was busy: over the windows
		// what it launched and had not run is bounded by its queue. A
		// cost beyond that is a fit gone wrong, not a tenant apart: with
		// half a second queued and samples 200 ms late, a start's backlog
		// ran in the first windows of two tenants of one program (busy
		// throughout, a fifth of it launched there), and least squares put
		// one at 14,341 ns per unit, 4.6 times the busy time, and the
		// other below nothing, taken for a sliver: 12.1 + 75.4 for 45 +
		// 45, simulated.
		if raw*scale[key]*float64(n) > regressOver*busy {
			return nil, false
		}
		c := max(raw, minCost*pooled)
		if se := math.Sqrt(max(s2*inv[i][i], 0)) / scale[key]; se > regressMaxRel*c {
			if raw+regressSigmas*se > regressSliver*pooled {
				return nil, false
			}
			sliver = true
		}
		out[key] = c
	}
	if sliver {
		return out, true // the pooled cost is a mean: another tenant's stands above it
	}
	for i := range cols {
		for j := i + 1; j < m; j++ {
			ci, cj := out[cols[i]], out[cols[j]]
			// variance of ci - cj in the scaled coordinates
			v := s2 * (inv[i][i]/(scale[cols[i]]*scale[cols[i]]) + inv[j][j]/(scale[cols[j]]*scale[cols[j]]) -
				2*inv[i][j]/(scale[cols[i]]*scale[cols[j]]))
			if math.Abs(math.Log(ci/cj)) > regressApart && math.Abs(ci-cj) > regressSigmas*math.Sqrt(max(v, 0)) {
				return out, true
			}
		}
	}
	return out, false
}

// columns are the tenants of keys that launched in rows, and the mean of
// each one's units there (the fit's columns are scaled to it: units differ
// by orders of magnitude between programs).
func columns(keys []string, rows []observation) (cols []string, scale map[string]float64) {
	scale = map[string]float64{}
	for _, key := range keys {
		var s float64
		for _, o := range rows {
			s += o.units[key]
		}
		if s > 0 {
			cols = append(cols, key)
			scale[key] = s / float64(max(len(rows), 1))
		}
	}
	return cols, scale
}

// invert returns the inverse of the small symmetric matrix a (Gauss-Jordan,
// partial pivoting); ok is false when it is singular or nearly so.
func invert(a [][]float64) ([][]float64, bool) {
	m := len(a)
	w := make([][]float64, m)
	var norm float64
	for i := range a {
		w[i] = make([]float64, 2*m)
		copy(w[i], a[i])
		w[i][m+i] = 1
		for _, v := range a[i] {
			norm = max(norm, math.Abs(v))
		}
	}
	if norm == 0 {
		return nil, false
	}
	for c := range m {
		p := c
		for r := c + 1; r < m; r++ {
			if math.Abs(w[r][c]) > math.Abs(w[p][c]) {
				p = r
			}
		}
		if math.Abs(w[p][c]) < 1e-9*norm {
			return nil, false
		}
		w[c], w[p] = w[p], w[c]
		d := w[c][c]
		for j := range w[c] {
			w[c][j] /= d
		}
		for r := range m {
			if r != c && w[r][c] != 0 {
				f := w[r][c]
				for j := range w[r] {
					w[r][j] -= f * w[c][j]
				}
			}
		}
	}
	out := make([][]float64, m)
	for i := range w {
		out[i] = w[i][m:]
	}
	return out, true
}
