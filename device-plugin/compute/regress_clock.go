package compute

import "math"

// clockCosts fits each tenant's cost at the rows' mean SM clock together
// with how far its kernels' time moves with the clock: busy = Σ c·u +
// Σ d·u·ln(mean/clock), each tenant's d/c the power of the clock its time
// goes as (1: bound by the clock; 0: by memory). atMeanClock takes every
// kernel as bound by the clock; where the clock swings with the load, a
// memory-bound tenant's windows are then read as dearer the faster the
// clock ran, and the clock ran fastest where it ran most (a probe at 30
// beside PyTorch at 60 read 0.157 ns per unit for 0.1404 and got 27.7,
// simulated H200). It returns nil where the clocks do not swing enough to
// tell (clockSwing), a cost is not well determined (clockMaxRel) or a
// tenant's power of the clock is not one a kernel has (outside
// [-clockPowerSlack, 1+clockPowerSlack]).
func clockCosts(keys []string, rows []observation) map[string]float64 {
	var sum, n float64
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, o := range rows {
		if o.clock > 0 {
			sum, n = sum+o.clock, n+1
			lo, hi = min(lo, o.clock), max(hi, o.clock)
		}
	}
	if n == 0 || math.Log(hi/lo) < clockSwing {
		return nil
	}
	mean := sum / n
	var cols []string
	scale := map[string]float64{}
	for _, key := range keys {
		var s float64
		for _, o := range rows {
			if o.clock > 0 {
				s += o.units[key]
			}
		}
		if s > 0 {
			cols = append(cols, key)
			scale[key] = s / n
		}
	}
	m := 2 * len(cols)
	if len(cols) < 2 || n < float64(max(regressMinN, regressMinPer*m)) {
		return nil
	}
	q := newNormal(m)
	x := make([]float64, m)
	row := func(o observation) {
		l := math.Log(mean / o.clock)
		for i, key := range cols {
			u := o.units[key] / scale[key]
			x[i], x[len(cols)+i] = u, u*l
		}
	}
	for _, o := range rows {
		if o.clock > 0 {
			row(o)
			q.add(x, o.busy)
		}
	}
	beta, inv, ok := q.solve()
	if !ok {
		return nil
	}
	var rss, period float64
	for _, o := range rows {
		if o.clock <= 0 {
			continue
		}
		row(o)
		var fit float64
		for i := range x {
			fit += beta[i] * x[i]
		}
		rss += (o.busy - fit) * (o.busy - fit)
		period += o.period
	}
	s2 := max(rss/(n-float64(m)), math.Pow(regressNoise*period/n, 2))
	out := make(map[string]float64, len(cols))
	for i, key := range cols {
		c, d := beta[i], beta[len(cols)+i]
		if c <= 0 || math.Sqrt(max(s2*inv[i][i], 0)) > clockMaxRel*c {
			return nil
		}
		if p := d / c; p < -clockPowerSlack || p > 1+clockPowerSlack {
			return nil
		}
		out[key] = c / scale[key]
	}
	return out
}
