package compute

import (
	"cmp"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/volcano-vgpu/volcano-vgpu/api"
)

// Programs as a real H100 runs them (REALGPU.md): what libvcuda counts per
// kernel (blocks × warps) says little about its GPU time.
var (
	simPlain   = simProgram{units: 2000 * 8, kernel: 2 * time.Millisecond}          // 2000 blocks of 256 threads, 2 ms
	simOneWarp = simProgram{units: 2000, kernel: 2 * time.Millisecond}              // same time, 1 warp per block: 8x fewer units
	simGEMM    = simProgram{units: 132 * 8, kernel: 4 * time.Millisecond}           // grid ≈ SM count, long
	simElem    = simProgram{units: 10000 * 8, kernel: 300 * time.Microsecond}       // many simTiny blocks, short
	simTiny    = simProgram{units: 20 * 8, kernel: 8 * time.Microsecond, depth: 64} // launch-bound
	simBig     = simProgram{units: 2000 * 8, kernel: 2 * time.Millisecond}
	simShort   = simProgram{units: 200 * 8, kernel: 200 * time.Microsecond}        // 200 blocks, short
	simDeep    = simProgram{units: 2000, kernel: 2 * time.Millisecond, depth: 256} // 0.5 s of work queued
)

func simT(name string, cores int, p simProgram) simTenant {
	return simTenant{name: name, cores: cores, prog: p, secs: 12, owned: true}
}

// simCase is one mix of tenants and what each must get (± 3 points).
type simCase struct {
	name  string
	specs []simTenant
	opts  simOptions
	want  map[string]float64
	// promptOnly: why the case is not run with late device samples
	promptOnly string
}

// simLate is how late the device samples of the suite's late runs arrive.
// Real drivers' lateness is not measured yet (REALGPU.md); at 100-200 ms
// the loop of 2026-11-26 missed in most cases (30+60 got 26+53 at 100 ms,
// 23+40 at 200, simulated), so every case runs late too.
const simLate = 200 * time.Millisecond

func TestSimShares(t *testing.T) {
	tests := []simCase{
		{name: "pair 30+60", specs: []simTenant{simT("a", 30, simPlain), simT("b", 60, simPlain)}, want: map[string]float64{"a": 30, "b": 60}},
		{name: "lone 10", specs: []simTenant{simT("a", 10, simPlain)}, want: map[string]float64{"a": 10}},
		{name: "lone 90", specs: []simTenant{simT("a", 90, simPlain)}, want: map[string]float64{"a": 90}},
		// launched freely before the first decision (libvcuda's boot), then
		// 50 ms late samples: its allowance must start from what it has now
		{name: "lone 10, late samples", specs: []simTenant{simT("a", 10, simPlain)}, opts: simOptions{delay: 50 * time.Millisecond},
			want: map[string]float64{"a": 10}},
		{name: "8x apart 30+60 together", specs: []simTenant{simT("a", 30, simOneWarp), simT("b", 60, simPlain)}, want: map[string]float64{"a": 30, "b": 60}},
		{name: "8x apart 50+50 together", specs: []simTenant{simT("a", 50, simOneWarp), simT("b", 50, simPlain)}, want: map[string]float64{"a": 50, "b": 50}},
		{name: "8x apart 60+30 together", specs: []simTenant{simT("a", 60, simOneWarp), simT("b", 30, simPlain)}, want: map[string]float64{"a": 60, "b": 30}},
		{name: "gemm 30 + elementwise 60", specs: []simTenant{simT("a", 30, simGEMM), simT("b", 60, simElem)}, want: map[string]float64{"a": 30, "b": 60}},
		{name: "gemm 50 + elementwise 50", specs: []simTenant{simT("a", 50, simGEMM), simT("b", 50, simElem)}, want: map[string]float64{"a": 50, "b": 50}},
		{name: "tiny 30 + big 60", specs: []simTenant{simT("a", 30, simTiny), simT("b", 60, simBig)}, want: map[string]float64{"a": 30, "b": 60}},
	}
	foreign := simTenant{name: "foreign", prog: simProgram{units: 1, kernel: 2 * time.Millisecond, depth: 1, hostGap: 10 * time.Millisecond}, secs: 12}
	tests = append(tests, []simCase{
		{name: "foreign 20% beside 30+60", specs: []simTenant{simT("a", 30, simPlain), simT("b", 60, simPlain), foreign},
			want: map[string]float64{"a": 26, "b": 53}},
		{name: "controller dies at 4 s", specs: []simTenant{simT("a", 30, simPlain), simT("b", 60, simPlain)},
			opts: simOptions{stopController: 4 * time.Second}, want: map[string]float64{"a": 30, "b": 60}},
		// The fallback is the share at the estimated cost: with ±20-point samples
		// it carries the calibration's error (a 26.2-27.7 for 30 after 8-16 s of
		// samples, simulated; docs/limiter.md), so this case runs noise-free.
		{name: "controller dies, different programs", specs: []simTenant{simT("a", 30, simOneWarp), simT("b", 60, simPlain)},
			opts: simOptions{stopController: 5 * time.Second, noiseFree: true}, want: map[string]float64{"a": 30, "b": 60}},
		// x's last work still shows in the windows after it left (seen late):
		// it must not count as the pair's, whose fallback holds from 7 s
		{name: "a pair starts as another leaves, controller dies 3 s later", specs: []simTenant{
			{name: "x", cores: 90, prog: simPlain, secs: 4, owned: true},
			{name: "a", cores: 30, prog: simPlain, secs: 8, owned: true, start: 4 * time.Second},
			{name: "b", cores: 60, prog: simPlain, secs: 8, owned: true, start: 4 * time.Second}},
			opts: simOptions{stopController: 7 * time.Second}, want: map[string]float64{"a": 30, "b": 60}},
		{name: "b rewinds its report", specs: []simTenant{simT("a", 30, simPlain), {name: "b", cores: 60, prog: simPlain, secs: 12, owned: true, rewind: true}},
			want: map[string]float64{"a": 30, "b": 60}},
		{name: "a starts 3 s after b", specs: []simTenant{{name: "a", cores: 30, prog: simOneWarp, secs: 9, owned: true, start: 3 * time.Second}, simT("b", 60, simPlain)},
			want: map[string]float64{"a": 30, "b": 60}},
		{name: "time slices with a switch cost", specs: []simTenant{simT("a", 30, simOneWarp), simT("b", 60, simPlain)},
			opts: simOptions{slice: 4 * time.Millisecond, switchCost: 200 * time.Microsecond}, want: map[string]float64{"a": 30, "b": 60},
			promptOnly: "the switches (5% of the GPU here) are busy time no sample explains, below the foreign-load threshold, so both tenants pay for them: 28.3 + 57.0 with prompt samples, b 56.6-56.9 late"},
		// 200 µs kernels: paced a kernel at a time, every kernel of a held-back
		// tenant cost a switch (27.3 + 54.6 here, 27.1 + 54.3 on the fake
		// driver); libvcuda launches them in bursts (compute.c VC_QUANTUM_NS)
		{name: "time slices, short kernels", specs: []simTenant{simT("a", 30, simShort), simT("b", 60, simShort)},
			opts: simOptions{slice: 2 * time.Millisecond, switchCost: 40 * time.Microsecond}, want: map[string]float64{"a": 30, "b": 60}},
		{name: "deep queues (half a second queued)", specs: []simTenant{simT("a", 30, simDeep), simT("b", 60, simPlain)},
			want: map[string]float64{"a": 30, "b": 60}},
		{name: "owners see no pid (same programs)", specs: []simTenant{simT("a", 30, simPlain), simT("b", 60, simPlain)},
			opts: simOptions{blindOwners: true}, want: map[string]float64{"a": 30, "b": 60}},
		{name: "best effort beside 30+50", specs: []simTenant{simT("a", 30, simPlain), simT("b", 50, simGEMM), simT("c", 0, simElem)},
			want: map[string]float64{"a": 30, "b": 50, "c": 18.5}},
	}...)
	for _, late := range []time.Duration{0, simLate} {
		for _, noise := range []int{0, 20} {
			for _, tt := range tests {
				if noise > 0 && tt.opts.noiseFree || late > 0 && (tt.promptOnly != "" || tt.opts.delay > 0) {
					continue
				}
				name := tt.name + map[bool]string{true: " noisy", false: ""}[noise > 0] + map[bool]string{true: " late", false: ""}[late > 0]
				t.Run(name, func(t *testing.T) {
					opts := tt.opts
					opts.noise = noise
					opts.delay = max(opts.delay, late)
					specs := tt.specs
					if noise > 0 { // ±20-point samples: costs settle to ±3 points in about 10 s of them
						specs = stretch(specs, 2)
						opts.stopController *= 2
					}
					got, obs := simulate(t, specs, opts)
					t.Logf("simulated: %s (foreign %.3f)", simString(got), obs.Foreign)
					for k, w := range tt.want {
						if d := got[k] - w; d > 3 || d < -3 {
							t.Errorf("%s got %.1f, want %.0f ± 3", k, got[k], w)
						}
					}
				})
			}
		}
	}
}

// TestSimWholeDeviceSamples: per-process samples as an H200 (driver 580)
// gives them, one a round, of one process, reading the whole device's busy
// time. Taken as shares they starved the smaller tenants (11.8 + 81.1 for
// 30 + 60 and 5.8 + 24.4 + 43.8 for 20 + 30 + 40 on the H200, throughput;
// 7.1 + 83.6 and 4.3 + 16.8 + 44.8 here); rounds that miss a launching
// tenant teach nothing until complete rounds show shares, and tenants of
// one program share by the device-wide estimate, and tenants of different
// programs by the fit over the excitation's windows (excite.go).
func TestSimWholeDeviceSamples(t *testing.T) {
	tests := []simCase{
		{name: "pair 30+60", specs: []simTenant{simT("a", 30, simPlain), simT("b", 60, simPlain)}, want: map[string]float64{"a": 30, "b": 60}},
		{name: "pair 50+50", specs: []simTenant{simT("a", 50, simPlain), simT("b", 50, simPlain)}, want: map[string]float64{"a": 50, "b": 50}},
		{name: "triple 20+30+40", specs: []simTenant{simT("a", 20, simPlain), simT("b", 30, simPlain), simT("c", 40, simPlain)},
			want: map[string]float64{"a": 20, "b": 30, "c": 40}},
		// late, its loop swung into saturation and a fit at 3 standard
		// errors split the three: 19.7 + 33.8 + 35.5 (regressSigmas)
		{name: "triple 20+30+40, 40 µs switches", specs: []simTenant{simT("a", 20, simPlain), simT("b", 30, simPlain), simT("c", 40, simPlain)},
			opts: simOptions{switchCost: 40 * time.Microsecond}, want: map[string]float64{"a": 20, "b": 30, "c": 40}},
		{name: "lone 30", specs: []simTenant{simT("a", 30, simPlain)}, want: map[string]float64{"a": 30}},
		{name: "a starts 3 s after b", specs: []simTenant{{name: "a", cores: 30, prog: simPlain, secs: 9, owned: true, start: 3 * time.Second}, simT("b", 60, simPlain)},
			want: map[string]float64{"a": 30, "b": 60}},
		// different programs: one pooled cost gave 72.0 + 18.0, 51.6 + 1.3,
		// 99.1 + 0.1, 15.0 + 75.1, 10.3 + 2.0 + 77.9, 97.1 + 2.9 and 1.9 +
		// 96.3 + 0.1 here before the excitation
		{name: "8x apart 30+60", specs: []simTenant{simT("a", 30, simOneWarp), simT("b", 60, simPlain)}, want: map[string]float64{"a": 30, "b": 60}},
		{name: "gemm 30 + elementwise 60", specs: []simTenant{simT("a", 30, simGEMM), simT("b", 60, simElem)}, want: map[string]float64{"a": 30, "b": 60}},
		// saturated throughout, split once the turns have run three phases
		// (overIdentified): at 6.0 s with samples 200 ms late (4.4 s before),
		// 16 s runs (12 s ones, measured from 6 s: 50.6 + 43.5)
		{name: "gemm 50 + elementwise 50", specs: stretch([]simTenant{simT("a", 50, simGEMM), simT("b", 50, simElem)}, 16.0/12), want: map[string]float64{"a": 50, "b": 50}},
		{name: "tiny 30 + big 60", specs: []simTenant{simT("a", 30, simTiny), simT("b", 60, simBig)}, want: map[string]float64{"a": 30, "b": 60}},
		{name: "triple of three programs", specs: []simTenant{simT("a", 20, simOneWarp), simT("b", 30, simPlain), simT("c", 40, simGEMM)},
			want: map[string]float64{"a": 20, "b": 30, "c": 40}},
		{name: "8x apart, a starts 3 s after b", specs: []simTenant{{name: "a", cores: 30, prog: simOneWarp, secs: 9, owned: true, start: 3 * time.Second}, simT("b", 60, simPlain)},
			want: map[string]float64{"a": 30, "b": 60}},
		{name: "balance 30 beside an elementwise 50", specs: []simTenant{{name: "a", cores: 30, policy: api.ComputeBalance, prog: simPlain, secs: 12, owned: true}, simT("b", 50, simElem)},
			want: map[string]float64{"a": 48.5, "b": 50}},
		// a best-effort tenant is not lent share; its cost is fitted all the
		// same, more slowly (c 11.8-15.0 in 12 s runs)
		{name: "best effort beside 30+50, three programs", specs: stretch([]simTenant{simT("a", 30, simPlain), simT("b", 50, simGEMM), simT("c", 0, simElem)}, 2),
			want: map[string]float64{"a": 30, "b": 50, "c": 18.5}},
	}
	for _, late := range []time.Duration{0, simLate} {
		for _, tt := range tests {
			t.Run(tt.name+map[bool]string{true: " late", false: ""}[late > 0], func(t *testing.T) {
				opts := tt.opts
				opts.wholeDevice, opts.delay = true, late
				got, obs := simulate(t, tt.specs, opts)
				t.Logf("simulated: %s (foreign %.3f)", simString(got), obs.Foreign)
				for k, w := range tt.want {
					if d := got[k] - w; d > 3 || d < -3 {
						t.Errorf("%s got %.1f, want %.0f ± 3", k, got[k], w)
					}
				}
			})
		}
	}
}

// TestSimQueuedPair: two tenants of one program with work queued. With 20
// ms each (the fake driver's default queue) on a full GPU, the time slicer,
// not the turns, splits it, and one tenant's launches swing with its queue;
// the fit read that noise as a cost and split them (regress: confirmed).
// With half a second queued (as a real GPU queues ~1000 launches) and
// samples 200 ms late, a start's backlog ran in the fit's first windows and
// it put one tenant's cost beyond the GPU's busy time (regressOver). These
// runs missed before: 51.5 + 44.5, 45.8 + 50.8, 51.0 + 45.4, 12.1 + 75.4 and
// 39.7 + 47.9.
func TestSimQueuedPair(t *testing.T) {
	short := simProgram{units: 200 * 8, kernel: 200 * time.Microsecond, depth: 100}
	long := simProgram{units: 2000 * 8, kernel: 2 * time.Millisecond, depth: 10}
	deepShort := simProgram{units: 200 * 8, kernel: 200 * time.Microsecond, depth: 2500}
	const sampled = 166667 * time.Microsecond // a device sample averages the last 1/6 s
	tests := []struct {
		name  string
		prog  simProgram
		share float64
		opts  simOptions
	}{
		{name: "200 µs kernels, 1/6 s samples", prog: short, share: 50, opts: simOptions{window: sampled}},
		{name: "200 µs kernels, samples 120 ms late", prog: short, share: 50, opts: simOptions{delay: 120 * time.Millisecond}},
		{name: "2 ms kernels, 1/6 s samples", prog: long, share: 50, opts: simOptions{window: sampled}},
		{name: "half a second queued, 45+45, samples 200 ms late", prog: simDeep, share: 45, opts: simOptions{delay: 200 * time.Millisecond}},
		{name: "half a second of 200 µs kernels, 45+45, 1/6 s samples 100 ms late", prog: deepShort, share: 45,
			opts: simOptions{window: sampled, delay: 100 * time.Millisecond}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opts := tt.opts
			opts.wholeDevice, opts.switchCost = true, 40*time.Microsecond
			got, obs := simulate(t, []simTenant{simT("a", int(tt.share), tt.prog), simT("b", int(tt.share), tt.prog)}, opts)
			t.Logf("simulated: %s (fitted %v)", simString(got), obs.Fitted)
			for _, k := range []string{"a", "b"} {
				if d := got[k] - tt.share; d > 3 || d < -3 {
					t.Errorf("%s got %.1f, want %.0f ± 3", k, got[k], tt.share)
				}
			}
		})
	}
}

// stretch runs every tenant f times as long (starts too).
func stretch(specs []simTenant, f float64) []simTenant {
	out := make([]simTenant, len(specs))
	for i, s := range specs {
		s.start = time.Duration(float64(s.start) * f)
		s.secs *= f
		out[i] = s
	}
	return out
}

// TestSimNoProcessSamples: no per-process samples at all (no owners: the
// chart's memory guard off, no host pid view). Costs then come from the
// device's busy time alone; shape-only costs mis-shared programs whose units
// cost 8x apart (72.0 + 18.0 for 30 + 60, simulated and on the fake driver),
// and the excitation's windows tell them apart.
// A start between device samples: 200 ms apart, each averaging the last
// 166 ms (the fake driver's default), read a few ms late, the first
// launches of a lone tenant ran outside every sample, and the window that
// charged them put its cost at 6.9 ns per unit for a true 125. Its windows
// after that were saturated, and for 7 s it held the whole GPU: 83.1 for 90
// over the second half (estimator.startsOnly).
func TestSimStartBetweenSamples(t *testing.T) {
	tests := []struct {
		name string
		prog simProgram
		late time.Duration
	}{
		{name: "2 ms kernels, 4 ms late", prog: simPlain, late: 4 * time.Millisecond},
		{name: "2 ms kernels, 12 ms late", prog: simPlain, late: 12 * time.Millisecond},
		{name: "2 ms kernels, 20 ms late", prog: simPlain, late: 20 * time.Millisecond},
		{name: "200 µs kernels, 12 ms late", prog: simShort, late: 12 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, _ := simulate(t, []simTenant{simT("a", 90, tt.prog)}, simOptions{wholeDevice: true, delay: tt.late,
				window: 166667 * time.Microsecond, switchCost: 40 * time.Microsecond})
			t.Logf("simulated: %s", simString(got))
			if d := got["a"] - 90; d > 3 || d < -3 {
				t.Errorf("a got %.1f, want 90 ± 3", got["a"])
			}
		})
	}
}

func TestSimNoProcessSamples(t *testing.T) {
	for _, tt := range []simCase{
		{name: "8x apart 30+60", specs: []simTenant{simT("a", 30, simOneWarp), simT("b", 60, simPlain)}, want: map[string]float64{"a": 30, "b": 60}},
		{name: "gemm 50 + elementwise 50", specs: []simTenant{simT("a", 50, simGEMM), simT("b", 50, simElem)}, want: map[string]float64{"a": 50, "b": 50}},
		{name: "pair 30+60", specs: []simTenant{simT("a", 30, simPlain), simT("b", 60, simPlain)}, want: map[string]float64{"a": 30, "b": 60}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, _ := simulate(t, tt.specs, simOptions{noAttribution: true})
			t.Logf("simulated, no per-process samples: %s", simString(got))
			for k, w := range tt.want {
				if d := got[k] - w; d > 3 || d < -3 {
					t.Errorf("%s got %.1f, want %.0f ± 3", k, got[k], w)
				}
			}
		})
	}
}

// TestSimNoiseSpread (SIM_SPREAD=1): how far a pair lands from its targets
// across noise seeds, as a run's length grows. SIM_PAIR=50,50 sets the
// targets (the elementwise tenant's first; default 30,60), SIM_SWITCH=40us
// a time slice's switch cost (default none), SIM_SECS=20,40 the lengths.
func TestSimNoiseSpread(t *testing.T) {
	if os.Getenv("SIM_SPREAD") == "" {
		t.Skip("SIM_SPREAD=1: an experiment, not a check")
	}
	ta, tb := 30, 60
	if p := os.Getenv("SIM_PAIR"); p != "" {
		if _, err := fmt.Sscanf(p, "%d,%d", &ta, &tb); err != nil {
			t.Fatalf("SIM_PAIR=%q: want two targets, e.g. 50,50: %v", p, err)
		}
	}
	var switchCost time.Duration
	if s := os.Getenv("SIM_SWITCH"); s != "" {
		var err error
		if switchCost, err = time.ParseDuration(s); err != nil {
			t.Fatalf("SIM_SWITCH=%q: want a duration, e.g. 40us: %v", s, err)
		}
	}
	lengths := []float64{20, 40, 80, 160}
	if s := os.Getenv("SIM_SECS"); s != "" {
		lengths = nil
		for _, f := range strings.Split(s, ",") {
			v, err := strconv.ParseFloat(f, 64)
			if err != nil {
				t.Fatalf("SIM_SECS=%q: want seconds, e.g. 20,40: %v", s, err)
			}
			lengths = append(lengths, v)
		}
	}
	for _, secs := range lengths {
		var worst, sum float64
		miss := 0
		const n = 40
		for seed := range uint64(n) {
			specs := []simTenant{simT("a", ta, simElem), simT("b", tb, simGEMM)}
			for i := range specs {
				specs[i].secs = secs
			}
			got, obs := simulate(t, specs, simOptions{noise: 20, seed: seed*7919 + 1, wholeDevice: os.Getenv("SIM_WHOLE") != "",
				switchCost: switchCost})
			if os.Getenv("SIM_SPREAD") == "v" {
				var ks []string
				for _, d := range obs.Decisions {
					ks = append(ks, fmt.Sprintf("%s k %.4g cal %v", d.Key, d.Cost, d.Calibrated))
				}
				t.Logf("%.0f s seed %d: %s %v", secs, seed, simString(got), ks)
			}
			d := max(math.Abs(got["a"]-float64(ta)), math.Abs(got["b"]-float64(tb)))
			worst, sum = max(worst, d), sum+d
			if d > 3 {
				miss++
			}
		}
		t.Logf("%.0f s runs, %d seeds: mean worst-tenant error %.2f, max %.2f, %d over 3 points", secs, n, sum/n, worst, miss)
	}
}

// TestSimPowerCappedClocks: a card capped at full load clocks higher below
// it (an H200: SM 1473 MHz solo at full load, 1980 MHz with one tenant at
// 10-50%), and every kernel's GPU time moves with the device's load
// (simOptions.boost: up to 1.2 times as fast below 60% busy, as the fake
// driver's FAKEGPU_BOOST). The fit of different programs' costs read that
// as noise: a cheap-per-unit program of short kernels at 30 beside an
// expensive one of long kernels at 60 stayed on the pooled cost, its own
// undetermined for seconds, and was starved (14.4 + 74.1 with samples 5 ms
// late, 9.9 + 77.5 at 50 ms; the fake driver's rehearsal 5.5 + 86.8). The
// fit now takes each window's busy time at the windows' mean SM clock
// (ClockSource, atMeanClock). With samples 200 ms late the same pair never
// split (16.8 + 68.2): near full load the back-off swung the busy time
// between 55% and 100% (backoffRoom). That case runs 24 s: once split, a
// pair whose targets and switches sum to full load cycles in and out of
// saturation with samples that late, and the saturated windows' time
// slices cost the dear tenant, so over 16 s the result hangs on when the
// split came (before drained rows: 28.1 + 58.4 over 16 s, 31.4 + 56.4 over
// 24 s; with them 30.7 + 56.8 and 30.2 + 58.2).
func TestSimPowerCappedClocks(t *testing.T) {
	cheap := simProgram{units: 1600, kernel: 200 * time.Microsecond, depth: 100} // 125 ns per unit
	dear := simProgram{units: 2000, kernel: 2 * time.Millisecond, depth: 10}     // 1000 ns per unit
	tests := []struct {
		name string
		a, b simProgram
		late time.Duration
		secs float64 // 0: 16
	}{
		{name: "cheap 30 beside dear 60, samples 5 ms late", a: cheap, b: dear, late: 5 * time.Millisecond},
		{name: "cheap 30 beside dear 60, samples 50 ms late", a: cheap, b: dear, late: 50 * time.Millisecond},
		{name: "dear 30 beside cheap 60, samples 200 ms late", a: dear, b: cheap, late: 200 * time.Millisecond},
		{name: "cheap 30 beside dear 60, samples 15 ms late", a: cheap, b: dear, late: 15 * time.Millisecond},
		{name: "cheap 30 beside dear 60, samples 200 ms late", a: cheap, b: dear, late: 200 * time.Millisecond, secs: 24},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			secs := cmp.Or(tt.secs, 16)
			specs := stretch([]simTenant{simT("a", 30, tt.a), simT("b", 60, tt.b)}, secs/12)
			got, obs := simulate(t, specs, simOptions{wholeDevice: true, switchCost: 40 * time.Microsecond, delay: tt.late,
				window: 166667 * time.Microsecond, boost: 0.2})
			t.Logf("simulated: %s (fitted %v)", simString(got), obs.Fitted)
			for k, want := range map[string]float64{"a": 30, "b": 60} {
				if d := got[k] - want; d > 3 || d < -3 {
					t.Errorf("%s got %.1f, want %.0f ± 3", k, got[k], want)
				}
			}
		})
	}
}
