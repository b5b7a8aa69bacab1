package compute

import (
	"math"
	"slices"
)

// The rows the fit is given (regress.go): the windows as seen, at their
// phase's means, joined where a saturated run drained, at the mean clock.

// phaseMeans returns rows with each saturated row's units at the mean of
// its phase's saturated rows: what the turns set, the queues' changes
// averaged out. Unsaturated rows stay as seen (their queues drain: what was
// launched ran).
func phaseMeans(rows []observation) []observation {
	type mean struct {
		n     float64
		units map[string]float64
	}
	phases := map[uint64]*mean{}
	for _, o := range rows {
		if !o.saturated {
			continue
		}
		m := phases[o.phase]
		if m == nil {
			m = &mean{units: map[string]float64{}}
			phases[o.phase] = m
		}
		m.n++
		for key, u := range o.units {
			m.units[key] += u
		}
	}
	out := make([]observation, len(rows))
	for i, o := range rows {
		out[i] = o
		if !o.saturated {
			continue
		}
		m := phases[o.phase]
		out[i].units = make(map[string]float64, len(m.units))
		for key, u := range m.units {
			out[i].units[key] = u / m.n
		}
	}
	return out
}

// overIdentified says whether rows give the fit that confirms a split
// (phaseMeans) more points than tenants launch in them: one a phase for the
// saturated windows (their units are the phase's mean there), one each for
// the others. As many points as costs fit them exactly, whatever the error
// in each, and a queue's change over a phase is a phase mean's error: two
// PyTorch-like tenants of one program at 50 + 50 that never synchronize (64
// matmuls queued, 107 ms) filled their queues through the first two
// phases, and the two means put them 38 times apart (1828 and 48 ns per
// unit): 32.3 + 61.7; 45 + 50 with 300 queued got 70.7 + 21.3 (simulated
// H200). A third phase repeats a turn; a genuine mix saturated throughout
// is split a phase later (cheap 50 + dear 50 at 5.73 s on average, from
// 4.36; TestSimSplitSweep).
func overIdentified(rows []observation) bool {
	phases := map[uint64]bool{}
	launching := map[string]bool{}
	points := 0
	for _, o := range rows {
		if !o.saturated {
			points++
		} else if !phases[o.phase] {
			phases[o.phase] = true
			points++
		}
		for key, u := range o.units {
			if u > 0 {
				launching[key] = true
			}
		}
	}
	return points > len(launching)
}

// anySaturated says whether any of rows is a saturated window.
func anySaturated(rows []observation) bool {
	for _, o := range rows {
		if o.saturated {
			return true
		}
	}
	return false
}

// spread is the ratio of the largest cost to the smallest.
func spread(costs map[string]float64) float64 {
	lo, hi := math.Inf(1), 0.0
	for _, c := range costs {
		lo, hi = min(lo, c), max(hi, c)
	}
	return hi / lo
}

// drained returns rows with each run of saturated windows joined to the
// unsaturated window that ends it (consecutive windows, one phase) as one
// row. A saturated window launches more than runs (its tenants' queues
// fill) or runs more than it launched (they drain), by up to a queue's
// worth, and the first window after the run runs the rest: on the fake
// driver clocked as an H200 a cheap 30 beside a dear 60 near full load
// swung in and out of saturation, those windows ran 20 ms more or less
// than their launches (10% of a window; one tenant's queue), and least
// squares took that noise in the units for a cost: the cheap tenant's was
// read 7% low and the dear one's 6% high (32.3 + 55.5 of the GPU for 30 +
// 60), and the noise kept the cheap tenant's cost undetermined for 7 s
// (its standard error twice that of the joined rows). The queues are
// nearly empty at both ends of a joined row (the windows before and after
// it are unsaturated), so over it what was launched ran, but for the work
// a window under saturatedAt still held queued where the run began. A run
// that no unsaturated window of its phase ends stays as its windows
// (phaseMeans confirms a split they carry): a GPU saturated throughout
// gives no other rows.
func drained(rows []observation) []observation {
	out := make([]observation, 0, len(rows))
	run := 0 // the saturated windows at out's end that a drain may join
	for _, o := range rows {
		joined := false
		if run > 0 {
			last := out[len(out)-1]
			if last.seq+1 != o.seq || last.phase != o.phase {
				run = 0
			}
		}
		if run > 0 && !o.saturated {
			j := observation{units: map[string]float64{}, steady: true, clean: true, phase: o.phase, seq: o.seq}
			var clocked float64 // the period of the joined windows with a clock reading
			join := func(w observation) {
				j.busy += w.busy
				j.period += w.period
				for key, u := range w.units {
					j.units[key] += u
				}
				if w.clock > 0 {
					j.clock += w.clock * w.period
					clocked += w.period
				}
			}
			for _, w := range out[len(out)-run:] {
				join(w)
			}
			join(o)
			if clocked > 0 {
				j.clock /= clocked // their mean clock
			}
			out = append(out[:len(out)-run], j)
			joined = true
		}
		if !joined {
			out = append(out, o)
		}
		switch {
		case o.saturated:
			run++
		default:
			run = 0
		}
	}
	return out
}

// nearClock leaves out the rows whose SM clock stands more than clockBand
// outside the range of the newest clockRecent rows' clocks (a row whose
// clock was not read stays).
func nearClock(rows []observation) []observation {
	lo, hi := math.Inf(1), math.Inf(-1)
	for i, n := len(rows)-1, 0; i >= 0 && n < clockRecent; i-- {
		if c := rows[i].clock; c > 0 {
			lo, hi, n = min(lo, c), max(hi, c), n+1
		}
	}
	if hi < lo {
		return rows
	}
	out := rows[:0:0]
	for _, o := range rows {
		if o.clock == 0 || o.clock >= lo*(1-clockBand) && o.clock <= hi*(1+clockBand) {
			out = append(out, o)
		}
	}
	return out
}

// atMeanClock returns rows with each one's busy time at the rows' mean SM
// clock (as is where a row's clock was not read). A power-capped card's
// clock moves with its load, and every kernel's GPU time with it: the
// fit's busy time then varies with the load, not only with what ran (the
// fake driver clocked as an H200, kernels up to 1.2 times as fast below 60%
// busy: a PyTorch stand-in 30 beside an elementwise one 60 read 5.5 + 86.8,
// three runs in three, its cost undetermined for 13 s in simulation while
// the pooled cost starved it). Compute-bound kernels' time goes as the
// inverse of the clock; memory-bound ones' less.
func atMeanClock(rows []observation) []observation {
	var sum, n float64
	for _, o := range rows {
		if o.clock > 0 {
			sum, n = sum+o.clock, n+1
		}
	}
	if n == 0 {
		return rows
	}
	mean := sum / n
	out := make([]observation, len(rows))
	for i, o := range rows {
		out[i] = o
		if o.clock > 0 {
			out[i].busy = o.busy * o.clock / mean
		}
	}
	return out
}

// stalls returns the seqs of the windows of obs below saturation in which
// every tenant that launches in their phase launched less than
// regressStall of its usual rate there (the median of its clean, steady
// windows' rates), of the window before each (the stall began in it) and
// of the two after it: the fit leaves them out. The tenants stopped launching (their host was busy) while the GPU
// ran what they had queued and then idled, and they refilled their queues:
// launched is not what ran there, and the fit cannot tell. On the fake
// driver clocked as an H100, at 50 + 50 on a GPU the targets fill, both
// tenants stopped for some 60 ms: a window 60% busy with a third launched,
// then one 58% busy refilling (the costs that ran missed them by 19 and 28%
// of the window, the others by 1%). They were the only windows below
// saturation, least squares followed them, and the costs' ratio moved from
// 8.0 to 6.5 for the 6 s they stayed in the fit: 45.8 + 52.2. Where the GPU
// stays saturated the queues fill it and no window is a stall: a replay of
// a real H200's one-program pair, whose units come from one counter
// reading a period, has such windows, and leaving them out split the pair.
// A tenant that launches now and then beside one that does not is no
// stall: its windows tell its cost. In the simulation (TestSimStalls) the
// host stopping both tenants of an 8x-apart 50 + 50 for 60 or 120 ms
// every 2.3 s put their costs' ratio at 6.7 or 6.4 for 8 (the split 44.9 +
// 50.0 at 120 ms); with the stalls left out 7.7 and 7.8, but only with the
// window each began in (without it 6.9 at 120 ms). A stall of 40 ms leaves
// more than half of a 100 ms window's launches and is not seen (7.0).
func stalls(obs []observation) map[uint64]bool {
	rates := map[uint64]map[string][]float64{} // phase, tenant: rates of its windows
	for _, o := range obs {
		if !o.clean || !o.steady || o.period <= 0 {
			continue
		}
		ph := rates[o.phase]
		if ph == nil {
			ph = map[string][]float64{}
			rates[o.phase] = ph
		}
		for key, u := range o.units {
			ph[key] = append(ph[key], u/o.period)
		}
	}
	usual := map[uint64]map[string]float64{}
	for phase, ph := range rates {
		usual[phase] = map[string]float64{}
		for key, r := range ph {
			if len(r) >= regressMinPer {
				slices.Sort(r)
				usual[phase][key] = r[len(r)/2]
			}
		}
	}
	out := map[uint64]bool{}
	for _, o := range obs {
		u := usual[o.phase]
		if o.period <= 0 || len(u) == 0 || o.saturated {
			continue
		}
		stall := true
		for key, rate := range u {
			if rate > 0 && o.units[key]/o.period >= regressStall*rate {
				stall = false
				break
			}
		}
		if stall {
			out[o.seq-1], out[o.seq], out[o.seq+1], out[o.seq+2] = true, true, true, true // its start, the refill
		}
	}
	return out
}

// leaveOutFills returns rows less each one that the fit over the others
// misses by more than regressFill of its period (its deleted residual: the
// residual over one less its leverage, at the rows' mean clock): a window
// in which a tenant filled a deep queue launched a queue's worth more than
// ran, and one in which a backlog ran shows busy time nobody launched
// there. Least squares leans on such a window where its units stand apart
// from the others'. Simulated H200, PyTorch 60 with 64 matmuls queued
// beside the elementwise probe 30: the loop held both near nothing for
// 0.4 s while the GPU stayed saturated (its back-off), then PyTorch refilled
// its queue: one window launched 1.6 times its usual units, a third more
// than the window could run. Once the windows at the older clock were left
// out (nearClock) it was the fit's only window of such units: PyTorch read
// 629 ns per unit for about 700 and the probe 0.175 for 0.140 for the 6 s
// it stayed, and they got 67.2 + 26.2 (61.1 + 31.0 with it left out). Its
// deleted residual was 40% of the window, the others' within 10%. Where
// fewer rows would be left than a fit needs, none is left out.
func leaveOutFills(keys []string, rows []observation) []observation {
	at := atMeanClock(rows)
	cols, scale := columns(keys, at)
	m := len(cols)
	least := max(regressMinN, regressMinPer*m)
	if m < 2 || len(at) < least {
		return rows
	}
	q := newNormal(m)
	x := make([]float64, m)
	scaled := func(o observation) {
		for i, key := range cols {
			x[i] = o.units[key] / scale[key]
		}
	}
	for _, o := range at {
		scaled(o)
		q.add(x, o.busy)
	}
	beta, inv, ok := q.solve()
	if !ok {
		return rows
	}
	out := rows[:0:0]
	for i, o := range at {
		scaled(o)
		var fit, h float64 // h: the row's leverage, xᵀ(XᵀX)⁻¹x
		for a := range x {
			fit += beta[a] * x[a]
			for b := range x {
				h += x[a] * inv[a][b] * x[b]
			}
		}
		if h < 1 && math.Abs(o.busy-fit)/(1-h) > regressFill*o.period {
			continue
		}
		out = append(out, rows[i])
	}
	if len(out) < least {
		return rows
	}
	return out
}
