package compute

import (
	"sort"
	"time"
)

// ProcessSample is one per-process utilization sample: the fraction (0..1)
// of the GPU a host pid used over (StartNs, EndNs] of CLOCK_MONOTONIC.
type ProcessSample struct {
	PID     uint32
	StartNs uint64
	EndNs   uint64
	SM      float64
}

// ProcessSource gives a GPU's per-process samples since the previous call
// (NVML per-process utilization). A Source that implements it feeds the
// calibration when Runner.Owners is set.
type ProcessSource interface {
	Processes(uuid string, mono uint64, wall time.Time) ([]ProcessSample, error)
}

// gpuSamples is what the runner keeps per GPU to turn per-process samples
// into a Measurement: the device's recent busy windows (to know its busy
// time over a sample's window) and samples waiting for the device windows
// to cover them (device samples arrive late).
type gpuSamples struct {
	windows []Window
	clocks  []clockReading // the SM clock at each poll, the last seconds
	pending []ProcessSample
	// unowned pids seen in the previous batch: a pid no tenant owns counts
	// as foreign load from its second batch in a row on. A process of a
	// container that just ended (its pid no longer resolves) shows up once,
	// with its last second; a foreign process keeps showing up.
	unowned map[uint32]bool
	// unmapped counts rounds in a row whose samples no owner maps while
	// tenants launch; unmappedSaid: the log line about them was written
	// (again once samples map, and stop mapping)
	unmapped     int
	unmappedSaid bool
	// overReads counts rounds whose samples summed above the device's busy
	// time (not shares: dropped); overReadSaid: the log line about them
	overReads    int
	overReadSaid bool
	// sharesSeen: a complete round of several samples summed to the
	// device's busy time or below (the samples are shares)
	sharesSeen bool
	// partial counts rounds dropped for missing a launching tenant;
	// partialSaid: the log line about them
	partial     int
	partialSaid bool
	// fittedSaid: the log line about costs from the excitation's fit
	// (GPU.Fitted) was written, and not taken back since
	fittedSaid bool
}

// unmappedSay: rounds in a row of samples no owner maps before the runner
// says so. One such round is a node's ordinary churn: a container's process
// that ended has its last sample a round later, when its pid no longer
// resolves, while the new one's first sample is yet to come (the demo's
// second workloads on the simulated cluster, which maps as a node does).
const unmappedSay = 3

// sayUnmapped notes a round's measurement m (nil: none) and reports whether
// to say now that no owner maps the samples.
func (g *gpuSamples) sayUnmapped(m *Measurement) bool {
	switch {
	case m == nil:
	case m.Unmapped:
		g.unmapped++
		if g.unmapped >= unmappedSay && !g.unmappedSaid {
			g.unmappedSaid = true
			return true
		}
	case len(m.Tenants) > 0:
		g.unmapped, g.unmappedSaid = 0, false
	}
	return false
}

const (
	windowsNs = 10e9 // device windows kept
	pendingNs = 5e9  // a sample the device windows do not cover by then is used without them
)

func (g *gpuSamples) addWindow(w Window) {
	g.windows = append(g.windows, w)
	i := 0
	for i < len(g.windows) && float64(w.EndNs-g.windows[i].EndNs) > windowsNs {
		i++
	}
	g.windows = g.windows[i:]
}

// busy is the device busy time over [a, b], the windows pro rata; ok is
// false when they do not cover it.
func (g *gpuSamples) busy(a, b uint64) (float64, bool) {
	if len(g.windows) == 0 || g.windows[0].StartNs > a || g.windows[len(g.windows)-1].EndNs < b {
		return 0, false
	}
	var sum float64
	for _, w := range g.windows {
		lo, hi := max(w.StartNs, a), min(w.EndNs, b)
		if hi > lo && w.EndNs > w.StartNs {
			sum += w.BusyNs * float64(hi-lo) / float64(w.EndNs-w.StartNs)
		}
	}
	return sum, true
}

// measurement turns the pending samples the device windows cover (or that
// waited too long) into one Measurement: each sample's pid mapped to its
// tenant by owner, a tenant's units read from its launched counter over the
// sample's window by units (keys: every tenant on the GPU). nil when none
// is ready.
func (g *gpuSamples) measurement(now uint64, owner func(pid uint32) (string, bool), units func(key string, a, b uint64) (float64, bool), keys []string) *Measurement {
	var ready, wait []ProcessSample
	covered := uint64(0)
	if n := len(g.windows); n > 0 {
		covered = g.windows[n-1].EndNs
	}
	for _, s := range g.pending {
		if s.EndNs <= covered || float64(now-min(now, s.EndNs)) > pendingNs {
			ready = append(ready, s)
		} else {
			wait = append(wait, s)
		}
	}
	g.pending = wait
	if len(ready) == 0 {
		return nil
	}
	sort.Slice(ready, func(i, j int) bool { return ready[i].EndNs < ready[j].EndNs })
	m := &Measurement{Tenants: map[string]Measured{}}
	lo, hi := ready[0].StartNs, ready[0].EndNs
	aligned := true
	type span struct{ a, b uint64 }
	spans := map[string]span{}
	unowned := map[uint32]bool{}
	for _, s := range ready {
		d := float64(s.EndNs - min(s.StartNs, s.EndNs))
		lo, hi = min(lo, s.StartNs), max(hi, s.EndNs)
		aligned = aligned && s.StartNs == ready[0].StartNs && s.EndNs == ready[0].EndNs
		key, ok := owner(s.PID)
		if !ok {
			m.Unowned++
			unowned[s.PID] = true
			if g.unowned[s.PID] {
				m.ForeignNs += s.SM * d
			} else {
				m.UnknownNs += s.SM * d
			}
			continue
		}
		t := m.Tenants[key]
		t.BusyNs += s.SM * d
		m.Tenants[key] = t
		sp, seen := spans[key]
		if !seen {
			sp = span{s.StartNs, s.EndNs}
		}
		spans[key] = span{min(sp.a, s.StartNs), max(sp.b, s.EndNs)}
	}
	for key, sp := range spans {
		u, ok := units(key, sp.a, sp.b)
		t := m.Tenants[key]
		t.Units, t.NoUnits = u, !ok // counter started or rewound in the window: nothing to learn from it
		m.Tenants[key] = t
	}
	g.unowned = unowned
	// complete: every tenant that launched (or started) in the window has a
	// sample in it, else the residual would read its GPU time as foreign (a
	// pair starting together left 26-36% of phantom foreign load from the
	// first round, fake driver)
	launched, complete := false, true
	for _, key := range keys {
		u, ok := units(key, lo, hi)
		if ok && u > 0 {
			launched = true
		}
		if _, has := m.Tenants[key]; (!ok || u > 0) && !has {
			complete = false
		}
	}
	if len(m.Tenants) == 0 && m.ForeignNs > 0 && launched {
		// Tenants launched work in the window, yet no sample is theirs: the
		// owners cannot see their processes (no host pid view, a cgroup
		// layout not understood). Their time is not foreign load.
		m.UnknownNs += m.ForeignNs
		m.ForeignNs = 0
		m.Unmapped = true
	}
	m.SpanNs = float64(hi - lo)
	b, inWindows := g.busy(lo, hi)
	if inWindows && aligned && len(ready) > 1 && sampled(m) > b+overRead*m.SpanNs {
		// Not shares of the GPU: samples that each read about the whole
		// device's busy time (as an H200's one sample a round does), more
		// than one in a round. Taken as shares, the smaller tenant's cost
		// per unit read several times its true one and the controller
		// starved it. Nothing is learned from the round, and what was
		// learned before it is suspect (Measurement.OverRead).
		g.overReads++
		return &Measurement{SpanNs: m.SpanNs, OverRead: true}
	}
	if inWindows && aligned && len(ready) > 1 && complete {
		g.sharesSeen = true
	}
	if !complete && (g.overReads > 0 || !g.sharesSeen) {
		// A round that misses a tenant who launched in it holds that
		// tenant's time too on a GPU whose samples are not shares: an H200
		// (driver 580) gives one sample a round, of one process, reading the
		// whole device's busy time (a process taking 10% beside a saturating
		// one was the one in 3 rounds of 27). Taken as its share, the
		// sampled tenant's cost per unit read far above its true one, and
		// the controller starved the smaller of a pair (11.8 + 81.1 for 30 +
		// 60 on the H200, 7.1 + 83.6 simulated). Only once complete rounds
		// of several samples showed shares is such a round taken.
		g.partial++
		if m.Unmapped {
			// nothing to learn from it either, but the runner says that no
			// owner maps the samples: every such round is also partial (its
			// launching tenants have none), and the warning never came
			return &Measurement{SpanNs: m.SpanNs, UnknownNs: m.UnknownNs, Unowned: m.Unowned, Unmapped: true}
		}
		return nil
	}
	// the residual (device busy no sample explains) only from one sampling
	// round: samples stamped apart each cover part of the processes
	if inWindows && aligned && complete {
		m.BusyNs = b
	}
	return m
}

// unshared: the GPU's per-process samples give no tenant's share while
// tenants run together: rounds of several samples summed above its busy
// time, or rounds left out launching tenants for a while and none showed
// shares (an H200's one sample a round).
func (g *gpuSamples) unshared() bool {
	return g.overReads > 0 || (g.partial >= partialUnshared && !g.sharesSeen)
}

// partialUnshared: rounds dropped for missing a launching tenant, with no
// round showing shares, before the GPU counts as unshared (a second of an
// H200's rounds; a tenant's first round or two on an H100, which samples
// every process once a second, never reach it).
const partialUnshared = 5

// partialSay: rounds dropped for missing a launching tenant (with no round
// showing shares) before the runner says so.
const partialSay = 10

// overRead is how far (a fraction of the window) a round's samples may sum
// above the device's busy time before they are taken for what each process
// saw of the whole GPU rather than its share of it. Real shares sum to the
// device's figure or below (H100: pairs read 100 or 76 at a device 99).
const overRead = 0.1

// sampled is the GPU time a Measurement's samples add up to.
func sampled(m *Measurement) float64 {
	sum := m.ForeignNs + m.UnknownNs
	for _, t := range m.Tenants {
		sum += t.BusyNs
	}
	return sum
}

// clockReading is the SM clock read at a poll.
type clockReading struct {
	at  uint64 // ns, the Runner's clock
	mhz float64
}

// clockKeep: how long clock readings are kept (windows are seen up to a
// few hundred ms late).
const clockKeep = 3 * time.Second

// clockNear: how far from a window a clock reading stands in for one within it
// (clockOver): a few of the controller's polls.
const clockNear = 50 * time.Millisecond

func (g *gpuSamples) addClock(at uint64, mhz float64) {
	g.clocks = append(g.clocks, clockReading{at: at, mhz: mhz})
	i := 0
	for i < len(g.clocks) && g.clocks[i].at+uint64(clockKeep) < at {
		i++
	}
	g.clocks = g.clocks[i:]
}

// clockOver is the mean SM clock read within [start, end]; where none was
// (a window shorter than the poll: a device sample stamped late made one of
// 4 ms on the fake driver, its host busy), the reading nearest it within
// clockNear (0: none).
func (g *gpuSamples) clockOver(start, end uint64) float64 {
	var sum float64
	n := 0
	near, nearest := uint64(clockNear), 0.0
	for _, c := range g.clocks {
		if c.at >= start && c.at <= end {
			sum += c.mhz
			n++
		}
		if d := max(start-min(start, c.at), c.at-min(c.at, end)); d <= near {
			near, nearest = d, c.mhz
		}
	}
	if n == 0 {
		return nearest
	}
	return sum / float64(n)
}
