package compute

import (
	"math"
	"slices"
	"testing"
)

// stalledPair: two programs (a 125 ns per unit, b 1000) at 50 + 50 fill
// the GPU, taking turns (d 0.05, phases of 20 windows of 100 ms), a's
// units moved by its queue's changes; after window at (when set) what
// follows it, as the fake driver clocked as an H100 showed it at 50 + 50:
// both tenants stopped launching for 60 ms while the GPU ran their queues,
// then refilled them.
func stalledPair(n, at int, stall []observation) []observation {
	const P = 100e6
	var o []observation
	q := 0.0
	for w := range n {
		phase := uint64(w / 20)
		s := 0.55
		if phase%2 == 1 {
			s = 0.45
		}
		next := float64((w*7919)%13)/12*2e6 - 1e6 // a's queue at the window's end, ns of work
		o = append(o, observation{busy: 0.99 * P, period: P, saturated: true, steady: true, clean: w%20 != 0, phase: phase,
			units: map[string]float64{"a": (s*0.99*P + next - q) / 125, "b": (1 - s) * 0.99 * P / 1000}})
		q = next
		if w == at {
			for _, st := range stall {
				st.steady, st.clean, st.phase, st.saturated = true, true, phase, st.busy >= saturatedAt*st.period
				o = append(o, st)
			}
		}
	}
	for i := range o {
		o[i].seq = uint64(i + 1)
	}
	return o
}

// bothStalled: the three windows the fake driver showed (busy, period,
// units): 3.9 ms 99% busy with next to nothing launched (a sample stamped
// late), 95 ms 60% busy with a third launched, 100 ms 58% busy refilling
func bothStalled() []observation {
	return []observation{
		{busy: 0.99 * 3.9e6, period: 3.9e6, units: map[string]float64{"a": 172, "b": 65}},
		{busy: 0.60 * 95e6, period: 95e6, units: map[string]float64{"a": 1.50e5, "b": 1.20e4}},
		{busy: 0.58 * 100e6, period: 100e6, units: map[string]float64{"a": 3.84e5, "b": 3.78e4}},
	}
}

func TestStalls(t *testing.T) {
	tests := []struct {
		name string
		obs  []observation
		want []uint64 // seqs left out
	}{
		{name: "a saturated pair taking turns: none", obs: stalledPair(60, -1, nil)},
		{name: "both tenants stop and refill: the stall, the window it began in and the two after it",
			obs: stalledPair(60, 45, bothStalled()), want: []uint64{47, 48, 49, 50}},
		{name: "both launching less on a saturated GPU: no stall (their queues fill it)", obs: func() []observation {
			o := stalledPair(60, -1, nil)
			for key := range o[30].units {
				o[30].units[key] *= 0.3
			}
			return o
		}()},
		{name: "one tenant launching now and then: no stall", obs: func() []observation {
			o := stalledPair(60, -1, nil)
			for i := 30; i < 40; i += 2 {
				o[i].units["b"] = 0
			}
			return o
		}()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []uint64
			for seq := range stalls(tt.obs) {
				got = append(got, seq)
			}
			slices.Sort(got)
			if !slices.Equal(got, tt.want) {
				t.Errorf("left out %v, want %v", got, tt.want)
			}
		})
	}
}

// regressWithin fits obs (estimator.regress) and wants the tenants apart,
// each cost within rel of want's.
func regressWithin(t *testing.T, obs []observation, want map[string]float64, rel float64) {
	t.Helper()
	e := newEstimator(window)
	e.obs = obs
	var keys []string
	for key := range want {
		keys = append(keys, key)
	}
	slices.Sort(keys)
	got, apart := e.regress(keys)
	if !apart {
		t.Fatalf("not apart: %v", got)
	}
	for _, key := range keys {
		if c := want[key]; math.Abs(got[key]/c-1) > rel {
			t.Errorf("%s: %.4g ns per unit, want %.4g ± %.0f%%", key, got[key], c, 100*rel)
		}
	}
}

// TestRegressStall: the stall's windows, the only ones below saturation,
// led least squares (the costs' ratio, 8 that ran, read 6.5 before they
// were left out, as on the fake driver).
func TestRegressStall(t *testing.T) {
	regressWithin(t, stalledPair(60, 45, bothStalled()), map[string]float64{"a": 125, "b": 1000}, 0.03)
}

// farClockPair: a PyTorch-like tenant a (835 ns per unit at the full-load
// clock, 1500 MHz; a quarter of its kernels' time bound by memory) and an
// elementwise one b (0.1404 ns per unit, bound by memory: no clock moves
// it), as the simulated H200 ran them beside each other: first 12 windows
// of a alone filling the GPU at the full-load clock (b starved by the
// pooled cost), then 48 windows at 2040 MHz of the pair at 50 + 50 taking
// turns (d 0.05, phases of 10 windows of 200 ms), both saturated.
func farClockPair() []observation {
	const P = 200e6
	cost := func(clock float64) float64 { return 835 * (0.25 + 0.75*1500/clock) }
	var o []observation
	for w := range 60 {
		ob := observation{busy: 0.99 * P, period: P, saturated: true, steady: true, clean: true, clock: 1500}
		if w < 12 {
			ob.units = map[string]float64{"a": 0.985 * P / cost(1500), "b": 0.005 * P / 0.1404}
		} else {
			phase := uint64((w - 12) / 10)
			s := 0.55
			if phase%2 == 1 {
				s = 0.45
			}
			ob.clock, ob.phase, ob.clean = 2040, phase+1, (w-12)%10 != 0
			ob.units = map[string]float64{"a": s * 0.98 * P / cost(2040), "b": (1 - s) * 0.98 * P / 0.1404}
		}
		ob.seq = uint64(w + 1)
		o = append(o, ob)
	}
	return o
}

// TestRegressFarClock: windows at a clock the loop has left carry the
// clock normalization's error (a memory-bound program's time does not go
// as the inverse of the clock, a GEMM's only three quarters of it), and
// least squares followed them: the simulated H200's probe beside a PyTorch
// with 128 matmuls queued read 0.1555 ns per unit for 0.1404 and got 46.3
// for 50. They are left out (nearClock) where the windows near the newest
// clocks determine the costs.
func TestRegressFarClock(t *testing.T) {
	obs := farClockPair()
	want := map[string]float64{"a": 835 * (0.25 + 0.75*1500/2040.0), "b": 0.1404}
	regressWithin(t, obs, want, 0.03)
	// what the far windows do to the fit (the failure this guards)
	all, _ := fitWindows([]string{"a", "b"}, obs)
	if r := all["a"] / all["b"] / (want["a"] / want["b"]); math.Abs(r-1) < 0.05 {
		t.Errorf("with the far windows the costs' ratio is off by only %.1f%%: the case no longer shows their error", 100*(r-1))
	}
}

func TestNearClock(t *testing.T) {
	at := func(clocks ...float64) []observation {
		var o []observation
		for i, c := range clocks {
			o = append(o, observation{seq: uint64(i + 1), clock: c})
		}
		return o
	}
	recent := func(lo, hi float64) []float64 {
		var c []float64
		for i := range clockRecent {
			c = append(c, lo+(hi-lo)*float64(i%2))
		}
		return c
	}
	tests := []struct {
		name   string
		clocks []float64
		want   int // rows kept
	}{
		{name: "the full-load clock of a regime the loop left", clocks: append([]float64{1500, 1500, 1500}, recent(1950, 2040)...), want: clockRecent},
		{name: "within the band below the newest clocks' range", clocks: append([]float64{1700, 1690}, recent(1950, 2040)...), want: clockRecent + 2},
		{name: "a clock that swings with the load keeps its windows", clocks: append([]float64{1500, 1760}, recent(1750, 2040)...), want: clockRecent + 2},
		{name: "unread clocks stay", clocks: append([]float64{0, 1500, 0}, recent(1950, 2040)...), want: clockRecent + 2},
		{name: "none read", clocks: []float64{0, 0, 0}, want: 3},
		{name: "fewer than clockRecent", clocks: []float64{1500, 2040, 2000}, want: 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := nearClock(at(tt.clocks...)); len(got) != tt.want {
				t.Errorf("kept %d rows, want %d", len(got), tt.want)
			}
		})
	}
}

// filledPair: a PyTorch-like tenant a (700 ns per unit) held near its rate
// (its units within ±3%) beside an elementwise b (0.14 ns per unit) whose
// units the turns and the loop move (from a tenth to a third of the GPU),
// n windows of 200 ms below saturation, taking turns (phases of 10
// windows). In window fill (where ≥ 0) a refilled a deep queue, as the
// simulated H200's PyTorch with 64 matmuls queued did after a back-off:
// the GPU ran throughout (99% busy, saturated) and a launched 80 ms of work
// more than the window ran (its queue's growth; 77 ms in the simulation).
func filledPair(n, fill int) []observation {
	const P = 200e6
	var o []observation
	for w := range n {
		phase := uint64(w / 10)
		ua := 0.55 * P / 700 * (1 + 0.03*float64((w*7)%5-2)/2)
		ub := (0.1 + 0.23*float64((w*11)%7)/6) * P / 0.14
		noise := 0.01 * P * float64((w*13)%3-1)
		ob := observation{busy: ua*700 + ub*0.14 + noise, period: P, units: map[string]float64{"a": ua, "b": ub},
			steady: true, clean: w%10 != 0, phase: phase, seq: uint64(w + 1), clock: 1900}
		if w == fill {
			ob.busy, ob.saturated = 0.99*P, true
			ob.units["a"] = (ob.busy + 80e6 - ub*0.14) / 700
		}
		o = append(o, ob)
	}
	return o
}

func TestLeaveOutFills(t *testing.T) {
	backlog := filledPair(30, -1)
	backlog[12].busy, backlog[12].saturated = 0.99*200e6, true // a start's backlog ran: busy nobody launched there
	backlog[12].units = map[string]float64{"a": 0.1 * backlog[12].units["a"], "b": 0.1 * backlog[12].units["b"]}
	tests := []struct {
		name string
		obs  []observation
		want []uint64 // seqs left out
	}{
		{name: "no window beyond the windows' noise: none", obs: filledPair(30, -1)},
		{name: "a tenant refills a deep queue: that window", obs: filledPair(30, 17), want: []uint64{18}},
		{name: "a backlog runs: that window", obs: backlog, want: []uint64{13}},
		{name: "too few windows to fit without it: none", obs: filledPair(regressMinN, 3)},
		{name: "one tenant: none", obs: func() []observation {
			o := filledPair(30, 17)
			for i := range o {
				delete(o[i].units, "b")
			}
			return o
		}()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			kept := map[uint64]bool{}
			for _, o := range leaveOutFills([]string{"a", "b"}, tt.obs) {
				kept[o.seq] = true
			}
			var out []uint64
			for _, o := range tt.obs {
				if !kept[o.seq] {
					out = append(out, o.seq)
				}
			}
			if !slices.Equal(out, tt.want) {
				t.Errorf("left out %v, want %v", out, tt.want)
			}
		})
	}
}

// TestRegressFill: the window in which a tenant refilled its queue was the
// only one with its units far from its usual, and least squares leaned on
// it (PyTorch read 629 ns per unit for about 700 and the probe 0.175 for
// 0.140: 67.2 + 26.2 for 60 + 30, simulated H200).
func TestRegressFill(t *testing.T) {
	obs := filledPair(40, 25)
	want := map[string]float64{"a": 700, "b": 0.14}
	regressWithin(t, obs, want, 0.03)
	// what the window does to the fit (the failure this guards)
	with, _ := fitWindows([]string{"a", "b"}, obs)
	if r := with["a"] / with["b"] / (want["a"] / want["b"]); math.Abs(r-1) < 0.05 {
		t.Errorf("with the refill's window the costs' ratio is off by only %.1f%%: the case no longer shows its error", 100*(r-1))
	}
}
