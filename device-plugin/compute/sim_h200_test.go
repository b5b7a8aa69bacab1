package compute

import (
	"math"
	"testing"
	"time"

	"github.com/volcano-vgpu/volcano-vgpu/api"
)

// The gpu check's programs as the H200 ran them (2026-11-29, driver
// 580.159.04, CUDA 13.0; docs/realgpu/h200-2026-11-29.txt): PyTorch's bf16
// matmuls of 8192 (1.67 ms each at the full-load clock, four then a
// synchronize, 691 W) and the probe's elementwise kernels (4.6 µs, 64 then
// a synchronize, 236 W at 97% busy, bound by memory, not by the SM clock).
var (
	simTorch = simProgram{units: 2000, kernel: 1670 * time.Microsecond, depth: 4, batch: 4, power: 1, memBound: 0.25}
	simProbe = simProgram{units: 32768, kernel: 4600 * time.Nanosecond, depth: 64, batch: 64, power: 0.13, memBound: 1}
)

// simH200 is the H200 as the simulation models it: 2.1 ms slices, 155 µs
// switches, whole-device per-process samples every 200 ms, device samples
// of 1/6 s read up to 20 ms late, the clock following power (1980 MHz
// below 62% of a GEMM's full draw, 1455 at full: 1.36 times as fast).
func simH200() simOptions {
	return simOptions{wholeDevice: true, slice: 2100 * time.Microsecond, switchCost: 155 * time.Microsecond,
		delay: 20 * time.Millisecond, window: sampleWindow, boost: 0.36, powerClock: true, rates: map[string]float64{}}
}

// simSolo runs each of the card's programs alone on the simulated H200 and
// returns its rate (kernels per second).
func simSolo(t *testing.T) map[*simProgram]float64 {
	t.Helper()
	solo := map[*simProgram]float64{}
	for _, p := range []*simProgram{&simTorch, &simProbe} {
		o := simH200()
		simulate(t, []simTenant{simT("solo", 0, *p)}, o)
		solo[p] = o.rates["solo"]
	}
	return solo
}

// simRates runs specs on the simulated H200 and returns each tenant's rate
// as a percentage of its program's solo rate, and its share of the GPU's
// time; solo holds the solo rates by program.
func simRates(t *testing.T, specs []simTenant, solo map[*simProgram]float64) (rate, gpu map[string]float64) {
	t.Helper()
	o := simH200()
	gpu, _ = simulate(t, stretch(specs, 16.0/12), o)
	rate = map[string]float64{}
	for _, s := range specs {
		for p, r := range solo {
			if *p == s.prog {
				rate[s.name] = 100 * o.rates[s.name] / r
			}
		}
	}
	return rate, gpu
}

// TestSimH200Table: the simulation reproduces what the H200 did with the
// gpu check's programs where the limiter's decisions matter least, within 3
// points: the rows that measure the GPU (the programs' solo rates, two
// unlimited tenants time-slicing, the probe starved beside PyTorch as
// NVIDIA's time slicing leaves it) and the one-tenant rows, whose rates
// follow the clock (power), not the GPU time the limiter holds. The
// simulation before (the clock following busy time, programs that never
// synchronize) missed: its clock gave 57.0 and 77.4 for the card's 60.7
// and 82.1 at 50 and 70 and 73.4 + 13.2 for the unlimited pair's 84.0 +
// 11.1; programs without synchronizes 53.1 + 50.1 for it.
func TestSimH200Table(t *testing.T) {
	solo := simSolo(t)
	// the card's solo rates: 598.7-600.1 matmuls/s, 2.171e5 elementwise/s
	for _, c := range []struct {
		p    *simProgram
		card float64
	}{{&simTorch, 599}, {&simProbe, 2.171e5}} {
		if math.Abs(solo[c.p]/c.card-1) > 0.03 {
			t.Errorf("solo rate %.4g/s, the card's %.4g/s", solo[c.p], c.card)
		}
	}
	tests := []struct {
		name  string
		specs []simTenant
		card  map[string]float64 // rate, % of solo (the mean of the day's runs)
	}{
		{name: "pytorch 10", specs: []simTenant{simT("a", 10, simTorch)}, card: map[string]float64{"a": 12.5}},
		{name: "pytorch 30", specs: []simTenant{simT("a", 30, simTorch)}, card: map[string]float64{"a": 36.6}},
		{name: "pytorch 50", specs: []simTenant{simT("a", 50, simTorch)}, card: map[string]float64{"a": 60.7}},
		{name: "pytorch 70", specs: []simTenant{simT("a", 70, simTorch)}, card: map[string]float64{"a": 82.1}},
		{name: "pytorch 90", specs: []simTenant{simT("a", 90, simTorch)}, card: map[string]float64{"a": 93.8}},
		{name: "pytorch unlimited x2", specs: []simTenant{simT("a", 0, simTorch), simT("b", 0, simTorch)},
			card: map[string]float64{"a": 45.7, "b": 45.7}},
		{name: "pytorch + probe unlimited", specs: []simTenant{simT("a", 0, simTorch), simT("b", 0, simProbe)},
			card: map[string]float64{"a": 84.0, "b": 11.1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rate, gpu := simRates(t, tt.specs, solo)
			for k, want := range tt.card {
				t.Logf("%s: %.1f%% of its solo rate (the card: %.1f), %.1f%% of the GPU's time", k, rate[k], want, gpu[k])
				if d := rate[k] - want; math.Abs(d) > 3 {
					t.Errorf("%s: %.1f%% of its solo rate, the card gave %.1f", k, rate[k], want)
				}
			}
		})
	}
}

// TestSimH200Shares: the check's share rows on the simulated H200, held in
// GPU time (the clock moves PyTorch's rate: TestSimH200Table). On the card
// (2026-11-29) 50 + 50 gave 45.7 + 45.7, PyTorch 30 + probe 60 40.2 + 54.7
// and 50 + 50 64.5 + 36.0 in rate; here, before the slots confined, 46.4 +
// 44.9, and the probe 55.2 and 37.2 of the GPU's time: the pair's queues
// time-sliced, and the probe, synchronizing every 0.3 ms of work, paid a
// switch or two for each batch while the fit charged it the switches' time
// (0.15-0.17 ns per unit for its true 0.14).
func TestSimH200Shares(t *testing.T) {
	solo := simSolo(t)
	balance := simT("b", 30, simTorch)
	balance.policy = api.ComputeBalance
	tests := []struct {
		name  string
		specs []simTenant
		want  map[string]float64 // % of the GPU's time, ± 3
		least map[string]float64 // at least (a balance tenant's spare)
		card  map[string]float64 // rate on the H200, % of solo
	}{
		{name: "pytorch 30+60", specs: []simTenant{simT("a", 30, simTorch), simT("b", 60, simTorch)},
			want: map[string]float64{"a": 30, "b": 60}, card: map[string]float64{"a": 31.2, "b": 61.4}},
		{name: "pytorch 50+50", specs: []simTenant{simT("a", 50, simTorch), simT("b", 50, simTorch)},
			want: map[string]float64{"a": 50, "b": 50}, card: map[string]float64{"a": 45.7, "b": 45.7}},
		{name: "pytorch 20+30+40", specs: []simTenant{simT("a", 20, simTorch), simT("b", 30, simTorch), simT("c", 40, simTorch)},
			want: map[string]float64{"a": 20, "b": 30, "c": 40}, card: map[string]float64{"a": 20.8, "b": 28.8, "c": 41.7}},
		{name: "pytorch 50 + balance 30", specs: []simTenant{simT("a", 50, simTorch), balance},
			want: map[string]float64{"a": 50}, least: map[string]float64{"b": 30}, card: map[string]float64{"a": 46.3, "b": 44.9}},
		{name: "pytorch 30 + probe 60", specs: []simTenant{simT("a", 30, simTorch), simT("b", 60, simProbe)},
			want: map[string]float64{"a": 30, "b": 60}, card: map[string]float64{"a": 40.2, "b": 54.7}},
		{name: "pytorch 50 + probe 50", specs: []simTenant{simT("a", 50, simTorch), simT("b", 50, simProbe)},
			want: map[string]float64{"a": 50, "b": 50}, card: map[string]float64{"a": 64.5, "b": 36.0}},
		// not a row of the check: the clock swings with the load here,
		// and a fit that took the probe's time as going with the clock
		// read it 12% dear (63.6 + 27.7; clockCosts)
		{name: "pytorch 60 + probe 30", specs: []simTenant{simT("a", 60, simTorch), simT("b", 30, simProbe)},
			want: map[string]float64{"a": 60, "b": 30}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rate, gpu := simRates(t, tt.specs, solo)
			for _, s := range tt.specs {
				k := s.name
				if card, ok := tt.card[k]; ok {
					t.Logf("%s: %.1f%% of the GPU's time, %.1f%% of its solo rate (the card: %.1f)", k, gpu[k], rate[k], card)
				} else {
					t.Logf("%s: %.1f%% of the GPU's time, %.1f%% of its solo rate", k, gpu[k], rate[k])
				}
				if want, ok := tt.want[k]; ok && math.Abs(gpu[k]-want) > 3 {
					t.Errorf("%s got %.1f%% of the GPU's time, want %.0f ± 3", k, gpu[k], want)
				}
				if least, ok := tt.least[k]; ok && gpu[k] < least-3 {
					t.Errorf("%s got %.1f%% of the GPU's time, want at least %.0f", k, gpu[k], least)
				}
			}
		})
	}
}

// TestSimUnconfined: limiter.confineSlots false (Runner.Unconfined) gives
// the pair its slots without confining them, and the pair time-slices as
// before the slots confined.
func TestSimUnconfined(t *testing.T) {
	for _, unconfined := range []bool{false, true} {
		o := simH200()
		o.unconfined = unconfined
		got, obs := simulate(t, []simTenant{simT("a", 50, simTorch), simT("b", 50, simTorch)}, o)
		for _, d := range obs.Decisions {
			if d.Control.Slot.PeriodUs == 0 || d.Control.Slot.Confine == unconfined {
				t.Errorf("unconfined %v: %s's slot %+v", unconfined, d.Key, d.Control.Slot)
			}
		}
		t.Logf("unconfined %v: %s", unconfined, simString(got))
	}
}

// simTorchDeep is simTorch never synchronizing (a training loop that reads
// no loss back), depth matmuls queued.
func simTorchDeep(depth int) simProgram {
	p := simTorch
	p.depth, p.batch = depth, 0
	return p
}

// TestSimH200DeepQueues: PyTorch-like tenants of one program that never
// synchronize (a training loop that reads no loss back: the launches block
// only on a full queue) are never split, on the simulated H200. Their
// saturated windows' units move with their queues, not the turns, and two
// phases' means put them apart (overIdentified): before, 50 + 50 with 64
// matmuls queued (107 ms) got 32.3 + 61.7, with 128 29.4 + 66.0, and 45 +
// 50 with 300 (0.5 s) 70.7 + 21.3. Where the targets fill the GPU they are
// held to an even split here; how near 50 each gets is the queue bound's
// (TestSimQueueBound: 48.8 + 48.6 at 64 queued, 46.6 each without it).
func TestSimH200DeepQueues(t *testing.T) {
	deep := simTorchDeep
	tests := []struct {
		name string
		a, b simTenant
		even bool // the targets fill the GPU: an even split, together at least 90
	}{
		{name: "50 + 50, 64 queued", a: simT("a", 50, deep(64)), b: simT("b", 50, deep(64)), even: true},
		{name: "50 + 50, 128 queued", a: simT("a", 50, deep(128)), b: simT("b", 50, deep(128)), even: true},
		{name: "45 + 50, 300 queued", a: simT("a", 45, deep(300)), b: simT("b", 50, deep(300))},
		{name: "30 + 60, 300 queued", a: simT("a", 30, deep(300)), b: simT("b", 60, deep(300))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := simH200()
			split := time.Duration(-1)
			o.fittedAt = &split
			got, _ := simulate(t, stretch([]simTenant{tt.a, tt.b}, 16.0/12), o)
			t.Logf("%s (split at %v)", simString(got), split)
			if split >= 0 {
				t.Errorf("one program's tenants split at %v: %s", split, simString(got))
			}
			a, b := got["a"], got["b"]
			switch {
			case tt.even && (math.Abs(a-b) > 3 || a+b < 90):
				t.Errorf("%s: want an even split of at least 90", simString(got))
			case !tt.even && (math.Abs(a-float64(tt.a.cores)) > 3 || math.Abs(b-float64(tt.b.cores)) > 3):
				t.Errorf("%s: want %d + %d ± 3", simString(got), tt.a.cores, tt.b.cores)
			}
		})
	}
}
