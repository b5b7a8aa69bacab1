package compute

import (
	"math"
	"time"

	"github.com/volcano-vgpu/volcano-vgpu/api"
)

// The simulated GPU: its tenants' programs, its time slices and clock, and
// the NVML samples it gives (sim_test.go drives it with the real Runner).

// simProgram is what one tenant runs.
type simProgram struct {
	units   uint64        // cost units per kernel, as libvcuda counts them (blocks × warps)
	kernel  time.Duration // GPU time of one kernel
	depth   int           // kernels queued before the launching thread blocks
	hostGap time.Duration // CPU time between launches
	// batch: launches this many, then waits for them all (a synchronize)
	batch int
	// power: what it draws while it runs, relative to a dense GEMM's (0: 1);
	// with simOptions.powerClock the clock follows it (an H200 drew 236 W
	// running a memory-bound elementwise loop 97% of the time, 691 W PyTorch)
	power float64
	// memBound: the part of its kernels' time a faster SM clock does not
	// shorten (a GEMM's kernels ran 1.25 times as fast at 1.36 times the
	// clock on an H200: about a quarter)
	memBound float64
}

type simTenant struct {
	name   string
	cores  int // 0: best effort
	policy api.ComputePolicy
	prog   simProgram
	start  time.Duration
	secs   float64
	owned  bool // false: a process no tenant owns (no limiter, not listed)
	rewind bool // rewinds its usage report every second
	// noSlots: its limiter ignores the node's slots (libvcuda before them)
	noSlots bool
	// setup: listed from start on, it launches only after this long (a
	// program importing, loading data: PyTorch took 3-5 s in the GPU check),
	// then runs secs, measured over their second half
	setup time.Duration

	pid        uint32
	launched   uint64
	waits      uint64
	waiting    bool
	wakeAt     time.Duration   // a held-back launch sleeps until then (compute.c)
	queue      []time.Duration // remaining GPU time of queued kernels
	nextLaunch time.Duration
	busy       []time.Duration // GPU time received, per 1 ms bucket
	done       []int32         // kernels completed, per 1 ms bucket
	inBatch    int             // launched in the current batch
	ctl, use   string
	ctlMap     []byte        // the control file, mapped as libvcuda maps it
	useMap     []byte        // the usage report, mapped shared
	seen       time.Duration // when the node's heartbeat last changed
	lastSeq    uint64
	ctlImage   api.ControlDevice
	staleBase  uint64        // launched when the node went stale
	staleAt    time.Duration // 0: not stale
	// the queue bound in a confining slot (queue.c; not with simOptions.unboundQueue)
	bounded   bool
	admitted  uint64        // units of the launches queued
	enq, deq  uint64        // kernels queued, completed
	events    []simEvent    // recorded, not yet seen complete
	evUnits   uint64        // admitted at the last event recorded
	drained   uint64        // admitted at the last event seen complete
	drainedAt time.Duration // when it was seen
	nsPerUnit float64       // in a confining slot: the node's cost (0: none)
}

// simGPU is the device: contexts time-slice, NVML samples what ran.
type simGPU struct {
	now        time.Duration
	slice      time.Duration // time slice of a context with work
	switchCost time.Duration
	cur        int // the context holding the GPU (-1: none)
	sliceLeft  time.Duration
	switchLeft time.Duration
	busy       []time.Duration // per 1 ms bucket
	tenants    []*simTenant
	lastDev    time.Duration // end of the last device sample returned
	lastProc   time.Duration // end of the last per-process sample round returned
	noise      int           // ± points of a per-process sample
	// wholeDevice: per-process samples as an H200 gives them (Processes)
	wholeDevice bool
	seed        uint64        // of the noise
	delay       time.Duration // device samples arrive this late
	window      time.Duration // a device sample averages this long before its stamp (0: see Busy)
	phase       time.Duration // the samples' stamps fall this long after whole periods of the clock
	// boost: power-capped clocks, as the fake driver's FAKEGPU_BOOST (an
	// H200 ran SM 1473 MHz at full load, 1980 with one tenant at 10-50%):
	// kernels launched run 1 + boost times as fast when the device was busy
	// under simKnee of the last 100 ms, as at full load when busy all of it,
	// linear between
	boost     float64
	clockSeen bool // the driver reports the SM clock (ClockSource)
	// powerClock: the clock follows the tenants' power (simProgram.power)
	powerClock bool
	speedAt    time.Duration
	speedOf    float64
}

const simKnee = 0.6

// simPowerKnee: with powerClock, the load (in a GEMM's power) below which
// the clock is at its highest: an H200 at 700 W held 1980 MHz with PyTorch
// 50% of the time (561 W), 1725 at 70% and 1455 at 100% (690 W).
const simPowerKnee = 0.62

// simClockMHz: the SM clock at full load (speed 1); the GPU reports it
// times speed (ClockSource) when clockSeen.
const simClockMHz = 1500

func (g *simGPU) ClockMHz(string) (float64, bool) {
	if !g.clockSeen {
		return 0, false
	}
	return simClockMHz * g.speed(), true
}

// speed is how fast kernels launched now run (boost), read every 10 ms.
func (g *simGPU) speed() float64 {
	if g.boost == 0 {
		return 1
	}
	if g.speedOf == 0 || g.now-g.speedAt >= 10*time.Millisecond {
		const window = 100 * time.Millisecond
		from := max(g.now-window, 0)
		u := float64(sumBuckets(g.busy, from, g.now)) / float64(window)
		knee := simKnee
		if g.powerClock { // the load as power: each tenant's time at its draw, switches at full
			knee = simPowerKnee
			for _, tn := range g.tenants {
				if tn.prog.power > 0 {
					u -= (1 - tn.prog.power) * float64(sumBuckets(tn.busy, from, g.now)) / float64(window)
				}
			}
		}
		g.speedAt, g.speedOf = g.now, 1+g.boost*min(max((1-u)/(1-knee), 0), 1)
	}
	return g.speedOf
}

const simStep = 10 * time.Microsecond

func (g *simGPU) run(dt time.Duration) {
	for left := dt; left > 0; {
		if g.switchLeft > 0 {
			d := min(left, g.switchLeft)
			g.switchLeft -= d
			g.account(nil, d)
			left -= d
			continue
		}
		if g.cur < 0 || len(g.tenants[g.cur].queue) == 0 || g.sliceLeft <= 0 {
			next := g.nextContext()
			if next < 0 {
				g.cur = -1
				return
			}
			if next != g.cur && g.cur >= 0 {
				g.switchLeft = g.switchCost
			}
			g.cur, g.sliceLeft = next, g.slice
			continue
		}
		t := g.tenants[g.cur]
		d := min(left, t.queue[0], g.sliceLeft)
		t.queue[0] -= d
		if t.queue[0] <= 0 {
			t.queue = t.queue[1:]
			t.deq++
			b := int((g.now + dt - left + d) / time.Millisecond)
			for len(t.done) <= b {
				t.done = append(t.done, 0)
			}
			t.done[b]++
		}
		g.sliceLeft -= d
		g.account(t, d)
		left -= d
	}
}

// nextContext is the next context with queued work after the current one.
func (g *simGPU) nextContext() int {
	n := len(g.tenants)
	for i := 1; i <= n; i++ {
		j := (max(g.cur, 0) + i) % n
		if len(g.tenants[j].queue) > 0 {
			return j
		}
	}
	return -1
}

func (g *simGPU) account(t *simTenant, d time.Duration) {
	b := int(g.now / time.Millisecond)
	for len(g.busy) <= b {
		g.busy = append(g.busy, 0)
	}
	if t == nil {
		g.busy[b] += d // a context switch keeps the engine busy
		return
	}
	g.busy[b] += d
	for len(t.busy) <= b {
		t.busy = append(t.busy, 0)
	}
	t.busy[b] += d
}

func sumBuckets(b []time.Duration, from, to time.Duration) time.Duration {
	var s time.Duration
	for i := int(from / time.Millisecond); i < int(to/time.Millisecond) && i < len(b); i++ {
		s += b[i]
	}
	return s
}

// Busy: device samples every 100 ms (200 ms with wholeDevice, as an H200
// gives them), whole percent, returned once. With a delay (late samples)
// each also averages the last 1/6 s, longer than the spacing, as a real
// driver's do; without, it covers its own period. window overrides both
// (1/6 s every 200 ms leaves a gap between samples: the fake driver's
// FAKEGPU_SAMPLE_WINDOW_US).
func (g *simGPU) Busy(_ string, mono uint64, _ time.Time) (Window, bool, error) {
	period := 100 * time.Millisecond
	if g.wholeDevice {
		period = 200 * time.Millisecond
	}
	avg := period
	if g.delay > 0 && !g.wholeDevice {
		avg = 166667 * time.Microsecond
	}
	if g.window > 0 {
		avg = g.window
	}
	end := (g.now-g.delay-g.phase)/period*period + g.phase
	if g.lastDev == 0 {
		if end >= period {
			g.lastDev = end
		}
		return Window{}, false, nil
	}
	if end <= g.lastDev {
		return Window{}, false, nil
	}
	var busy float64
	for t := g.lastDev; t < end; t += period {
		from := t + period - avg
		pct := math.Round(100 * float64(sumBuckets(g.busy, from, t+period)) / float64(avg))
		busy += min(pct, 100) / 100 * float64(period)
	}
	w := Window{StartNs: uint64(g.lastDev), EndNs: uint64(end), BusyNs: busy}
	g.lastDev = end
	return w, true, nil
}

// Processes: one sample per process that ran, per second, ± noise points
// that add up to nothing over a round (real shares sum to the device's
// figure or below: REALGPU.md). With wholeDevice, as an H200 (driver 580)
// gives them: a round every 200 ms with one sample, of one process that ran
// in it, picked about as often as its share of the round's busy time (a 10%
// process beside a saturating one in 3 rounds of 27, two saturating ones 15
// and 13 of 28), reading the device's busy fraction of the round.
func (g *simGPU) Processes(_ string, _ uint64, _ time.Time) ([]ProcessSample, error) {
	period := time.Second
	if g.wholeDevice {
		period = 200 * time.Millisecond
	}
	end := g.now / period * period
	if end <= g.lastProc {
		return nil, nil
	}
	first := g.lastProc == 0
	var out []ProcessSample
	for t := g.lastProc; t < end; t += period {
		device := sumBuckets(g.busy, t, t+period)
		var round []ProcessSample
		var noise []float64
		var mean float64
		pick := time.Duration(simNoise(0x5eed, t, 1<<20)+1<<20) * max(device, 1) / (2<<20 + 1) // where in the round's busy time the sample falls
		for _, tn := range g.tenants {
			b := sumBuckets(tn.busy, t, t+period)
			if b == 0 {
				continue
			}
			pct := math.Round(100 * float64(b) / float64(period))
			if g.wholeDevice {
				if pick -= b; pick >= 0 || len(round) > 0 {
					continue
				}
				pct = math.Round(100 * float64(device) / float64(period))
			} else {
				n := float64(simNoise(uint64(tn.pid)^g.seed, t, g.noise))
				noise = append(noise, n)
				mean += n
			}
			round = append(round, ProcessSample{PID: tn.pid, StartNs: uint64(t), EndNs: uint64(t + period), SM: pct})
		}
		for i := range round {
			if !g.wholeDevice {
				round[i].SM += math.Round(noise[i] - mean/float64(len(round)))
			}
			round[i].SM = min(max(round[i].SM, 0), 100) / 100
		}
		if !first {
			out = append(out, round...)
		}
	}
	g.lastProc = end
	return out, nil
}

func simNoise(pid uint64, t time.Duration, n int) int {
	if n == 0 {
		return 0
	}
	x := pid<<32 ^ uint64(t/time.Millisecond)
	x ^= x >> 33
	x *= 0xff51afd7ed558ccd
	x ^= x >> 33
	return int(x%uint64(2*n+1)) - n
}
