package compute

import "math"

// Measurement is what per-process GPU samples (NVML per-process
// utilization, about one per process a second, noisy, keyed by host pids)
// said about one window, mapped to tenants by the pids' owners. The runner
// builds it; the core only averages it.
type Measurement struct {
	SpanNs float64 // the window the samples cover
	BusyNs float64 // the GPU's busy time over the same window (device samples); 0: not known

	ForeignNs float64             // GPU time of processes no tenant owns (seen in the previous batch too)
	UnknownNs float64             // GPU time of unowned processes seen for the first time: not yet foreign
	Tenants   map[string]Measured // by Tenant.Key: tenants with samples in the window
	Unowned   int                 // samples of processes no tenant owns
	// Unmapped: tenants launched work in the window but no sample mapped to
	// any of them (the owners cannot see their processes); the unowned time
	// is then counted unknown, not foreign.
	Unmapped bool
	// OverRead: the round's samples summed above the device's busy time
	// (gpuSamples.measurement): not shares of the GPU. It carries nothing
	// else; the GPU's measured costs are dropped, for the device-wide ones.
	OverRead bool
}

// Measured is one tenant's GPU time in a measurement window and the cost
// units it launched over the same window.
type Measured struct {
	BusyNs float64
	Units  float64
	// NoUnits: the tenant's launched counter does not cover the window (it
	// started or went backwards in it): its GPU time is explained, but says
	// nothing about its cost per unit.
	NoUnits bool
}

// Calibration tunables. A per-process sample is off by up to 20 points; its
// average over n samples by about 12/√n points, so the cost per unit is an
// average over many samples: over the last calTauNs (about 15) while a
// tenant's cost may still move, over up to calHoldTauNs while the last
// calTauNs agree with it (calibration). A 15 s average alone stayed off by its noise for good: an
// elementwise 30 beside a GEMM 60 on the H100's samples landed 1.1 points
// off on average over 40 seeds whether it ran 40 s or 80 s (simulated).
const (
	calTauNs      = 15e9  // time constant of the recent average
	calHoldTauNs  = 120e9 // time constant of the held average
	procNoise     = 0.12  // standard deviation of a per-process sample, fraction of the GPU
	calSigmas     = 3.0   // how far apart (in standard deviations) the measured cost must stand
	foreignTauNs  = 10e9  // time constant of the foreign-load average
	residualFloor = 0.03  // device busy beyond what all samples explain, ignored up to this (noise)
	maxForeign    = 0.9   // of the GPU: what foreign load may take from the headroom
)

// calSums are decayed sums of a tenant's measured GPU time and units.
type calSums struct {
	ns, units, n, span float64 // GPU ns, units, samples, sampled time
}

func (c *calSums) add(m Measured, span, tau float64) {
	d := math.Exp(-span / tau)
	c.ns = c.ns*d + m.BusyNs
	c.units = c.units*d + m.Units
	c.n = c.n*d + 1
	c.span = c.span*d + span
}

// cost is the ns per unit the sums hold; ok is false while they hold none.
func (c *calSums) cost() (float64, bool) {
	if c.n <= 0 || c.units <= 0 || c.ns <= 0 { // nothing, or noise that read 0%
		return 0, false
	}
	return c.ns / c.units, true
}

// rel is the cost's relative error from the samples' noise: about
// procNoise / √n / f for a tenant using a fraction f of the GPU.
func (c *calSums) rel() float64 {
	f := c.ns / max(c.span, 1)
	return procNoise / math.Sqrt(max(c.n, 1)) / max(f, 0.01)
}

// calibration is a tenant's GPU ns per cost unit, from its measured GPU
// time: the held average (embedded), which cost and apart read, and the
// recent one. The held average's time constant grows with its age, from
// calTauNs to calHoldTauNs, and it starts again from the recent one
// whenever the recent one stands apart from it by more than its noise (a
// program that changed what its launches cost): a change is followed as
// fast as the recent samples show it, and a steady cost's noise keeps
// falling.
type calibration struct {
	calSums
	age    float64 // sampled time since the held average started again
	recent calSums
}

func (c *calibration) add(m Measured, span float64) {
	if m.NoUnits || (m.Units <= 0 && m.BusyNs <= 0) {
		return
	}
	c.age += span
	c.recent.add(m, span, calTauNs)
	c.calSums.add(m, span, min(max(c.age, calTauNs), calHoldTauNs))
	r, okR := c.recent.cost()
	h, okH := c.calSums.cost()
	if okR != okH || okR && math.Abs(math.Log(r/h)) > calSigmas*c.recent.rel() {
		c.calSums, c.age = c.recent, 0
	}
}

// apart says whether the measured cost stands apart from the device-wide
// estimate by more than its noise. A per-process sample is off by up to 20
// points (about 12 as a standard deviation), so the measured cost's relative
// error is about 0.12 / √n / f for a tenant using a fraction f of the GPU.
// The device-wide estimate is exact for tenants running the same program and
// has no noise; the measurement is right for any program.
func (c *calibration) apart(device float64) bool {
	k, ok := c.cost()
	if !ok || device <= 0 { // nothing to compare with yet: one noisy sample must not decide
		return false
	}
	return math.Abs(math.Log(k/device)) > calSigmas*c.calSums.rel()
}

// cost is the measured ns per unit; ok is false before any measurement (or
// while the tenant launched nothing measured). Not shrunk towards the
// device-wide estimate: programs differ from it by orders of magnitude, and
// a shrunk estimate took most of a closed-loop run to let go of it.
func (c *calibration) cost() (float64, bool) { return c.calSums.cost() }

// learn takes a period's per-process samples into the tenants'
// calibrations and the foreign load.
func (g *GPU) learn(in Input) {
	if in.Unshared {
		// Samples that give no shares give no foreign load either: an
		// unowned process's sample reads the whole device too, or is a
		// departed one's last work. A finished solo run's process, sampled
		// in a pair's first rounds, held 64% of the GPU as foreign load for
		// the pair's whole run (no later round measured anything), its
		// targets scaled to 11.5 + 23 for 30 + 60 (the fake driver as an
		// H200, rehearsal of 2026-11-29).
		g.foreign = foreign{}
	}
	m := in.Measurement
	switch {
	case m == nil:
	case m.OverRead:
		// per-process samples that are not shares (each active process
		// read about the whole device): what they taught so far, the
		// rounds that missed a tenant included, is no basis for a split
		for _, st := range g.tenants {
			st.cal, st.refit = calibration{}, true
		}
		g.measured, g.foreign = false, foreign{}
	default:
		if !in.Unshared {
			g.foreign.add(*m)
		}
		for key, mt := range m.Tenants {
			if st := g.tenants[key]; st != nil {
				st.cal.add(mt, m.SpanNs)
			}
		}
	}
}

// foreign is the GPU's load that no tenant's samples explain, averaged.
type foreign struct {
	owned, residual float64 // EWMA fractions of the GPU: unowned processes; device beyond samples
	samples         float64 // EWMA of the samples a round sums (their noise adds up in the residual)
	v               float64 // Σ of the squared weights in the EWMA: its noise, as a fraction of one round's
	seen            bool
}

func (f *foreign) add(m Measurement) {
	if m.SpanNs <= 0 {
		return
	}
	var tenants float64
	for _, t := range m.Tenants {
		tenants += t.BusyNs
	}
	owned := m.ForeignNs / m.SpanNs
	n := float64(len(m.Tenants) + m.Unowned)
	residual := f.residual
	if m.BusyNs > 0 {
		residual = (m.BusyNs - tenants - m.ForeignNs - m.UnknownNs) / m.SpanNs
	}
	if !f.seen { // the first batch: a process seen once is not in it (gpuSamples.unowned)
		if m.UnknownNs > 0 {
			return // it may be foreign: start from the next batch, which says so
		}
		f.owned, f.residual, f.samples, f.v, f.seen = owned, residual, n, 1, true
		return
	}
	w := 1 - math.Exp(-m.SpanNs/foreignTauNs)
	f.owned += w * (owned - f.owned)
	f.residual += w * (residual - f.residual)
	f.samples += w * (n - f.samples)
	f.v = (1-w)*(1-w)*f.v + w*w
}

// residualNoise is how far the averaged residual strays from zero by the
// samples' noise alone: each round's residual carries the noise of every
// sample in it (their sum), and the average shrinks it by the number of
// rounds in it (all of them at first, then its effective length). A residual within calSigmas of it is noise, not foreign load
// (independent ±20-point samples of two tenants read 3-7% of phantom load
// into a 10 s average, and the tenants then ran that much over).
func (f *foreign) residualNoise() float64 {
	return procNoise * math.Sqrt(max(f.samples, 1)*f.v)
}

// fraction of the GPU taken by foreign load.
func (f *foreign) fraction() float64 {
	if !f.seen {
		return 0
	}
	return min(max(f.owned, 0)+max(f.residual-max(residualFloor, calSigmas*f.residualNoise()), 0), maxForeign)
}
