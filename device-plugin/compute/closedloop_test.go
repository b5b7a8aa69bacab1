package compute

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/volcano-vgpu/volcano-vgpu/api"
)

func TestClosedLoopShares(t *testing.T) {
	if testing.Short() {
		t.Skip("closed loop on the fake driver: seconds per scenario")
	}
	tests := []struct {
		name  string
		specs []tenantSpec
		want  map[string]float64
	}{
		{name: "pair 30+60", specs: []tenantSpec{compute("a", 30), compute("b", 60)}, want: map[string]float64{"a": 30, "b": 60}},
		{name: "pair 50+50", specs: []tenantSpec{compute("a", 50), compute("b", 50)}, want: map[string]float64{"a": 50, "b": 50}},
		// the GPU not full: the demo's two 30% pods on one GPU got 33.1 each
		// while slots of 50 ms left a part of one in each device sample
		// (slotPeriodFor)
		{name: "pair 30+30, the GPU not full", specs: []tenantSpec{compute("a", 30), compute("b", 30)}, want: map[string]float64{"a": 30, "b": 30}},
		{name: "pair 10+90", specs: []tenantSpec{compute("a", 10), compute("b", 90)}, want: map[string]float64{"a": 10, "b": 90}},
		{name: "triple 20+30+40", specs: []tenantSpec{compute("a", 20), compute("b", 30), compute("c", 40)}, want: map[string]float64{"a": 20, "b": 30, "c": 40}},
		{name: "cost model 8x off, learned while alone", // a: 1 warp per block, b: 8; same GPU time per block.
			// a runs alone 3 s (its solo cost needs 10 settling and 3 solo windows of 100 ms after a
			// start that can take a second on a busy machine), then both as long as the
			// different-programs cases (their costs settle from per-process samples)
			specs: []tenantSpec{{name: "a", cores: 30, grid: 2000, block: 32, secs: 3 + diffSecs}, compute("b", 60).at(3*time.Second, diffSecs)},
			want:  map[string]float64{"a": 30, "b": 60}},
		{name: "tiny kernels beside large ones", // a: 20 µs kernels, b: 2 ms
			specs: []tenantSpec{{name: "a", cores: 30, grid: 20, block: 256, secs: 6}, compute("b", 60)}, want: map[string]float64{"a": 30, "b": 60}},
		{name: "memory-only tenant gets what the shares leave", // c asked no cores: 100 - 30 - 50, scaled to the headroom
			specs: []tenantSpec{compute("a", 30).at(0, 10), compute("b", 50).at(0, 10), compute("c", 0).at(0, 10)}, want: map[string]float64{"a": 30, "b": 50, "c": 18.5}}, // c: 98.5 - 80
		{name: "a container restarts beside a neighbour", // a's first process ends at 2 s, its second runs 2.5-8 s
			specs: []tenantSpec{compute("a", 30).at(0, 2), compute("a", 30).in("a", "a-restarted").at(2500*time.Millisecond, 5.5), compute("b", 60).at(0, 8)},
			want:  map[string]float64{"a-restarted": 30, "b": 60}},
		// b alone long enough (2 s) for its own cost to be known, a's the rest
		{name: "a container restarts 2 s later beside a neighbour", specs: []tenantSpec{compute("a", 30).at(0, 2), compute("a", 30).in("a", "a-restarted").at(4*time.Second, 6), compute("b", 60).at(0, 10)},
			want: map[string]float64{"a-restarted": 30, "b": 60}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := retry(t, func() map[string]float64 { return scenario(t, tt.specs, 0) },
				func(got map[string]float64) bool { return near(got, tt.want, 3) })
			within(t, got, tt.want, 3)
		})
	}
}

// Programs whose GPU time per block differs by orders of magnitude whatever
// their launch shape (cost units are blocks × warps):
//
//	gemm:        132 blocks × 8 warps, 20 µs a block: 2.6 ms kernels, 2.5 µs per unit
//	elementwise: 10,000 blocks × 8 warps, 0.1 µs a block: 1 ms kernels, 12.5 ns per unit
//	tiny:        1 block × 1 warp: the 4 µs launch floor, 4 µs per unit
//	graph:       CUDA graphs of 4 kernels of 500 blocks × 8 warps, 3 µs a block: 6 ms, 375 ns per unit
//
// compute (2000 blocks × 8 warps, 1 µs a block) costs 125 ns per unit.
//
// They run diffSecs, measured over the second half: each tenant's cost comes
// from per-process samples off by up to ±20 points, one a second, and takes
// about 15 of them to settle within ±3 points of share. Across 40 noise seeds
// (TestSimNoiseSpread) elementwise 30 + GEMM 60 missed ±3 in 6 runs of 20 s,
// 1 of 30 s.
const diffSecs = 30

func gemm(name string, cores int) tenantSpec {
	return tenantSpec{name: name, cores: cores, grid: 132, block: 256, nsPerBlock: 20000, secs: diffSecs}
}

func elementwise(name string, cores int) tenantSpec {
	return tenantSpec{name: name, cores: cores, grid: 10000, block: 256, nsPerBlock: 100, secs: diffSecs}
}

func tiny(name string, cores int) tenantSpec {
	return tenantSpec{name: name, cores: cores, grid: 1, block: 32, secs: diffSecs}
}

func graph(name string, cores int) tenantSpec {
	return tenantSpec{name: name, cores: cores, grid: 500, block: 256, nsPerBlock: 3000, graph: 4, secs: diffSecs}
}

// TestClosedLoopDifferentPrograms: tenants that start together and never run
// alone, whose cost per unit differs: only a measurement of each one's GPU
// time (per-process samples mapped to tenants) splits the GPU right.
func TestClosedLoopDifferentPrograms(t *testing.T) {
	if testing.Short() {
		t.Skip("closed loop on the fake driver: seconds per scenario")
	}
	long := func(s tenantSpec) tenantSpec { s.secs = diffSecs; return s }
	tests := []struct {
		name  string
		specs []tenantSpec
		want  map[string]float64
	}{
		{name: "gemm 30 beside elementwise 60", specs: []tenantSpec{gemm("a", 30), elementwise("b", 60)}, want: map[string]float64{"a": 30, "b": 60}},
		{name: "elementwise 30 beside gemm 60", specs: []tenantSpec{elementwise("a", 30), gemm("b", 60)}, want: map[string]float64{"a": 30, "b": 60}},
		{name: "gemm 50 beside elementwise 50", specs: []tenantSpec{gemm("a", 50), elementwise("b", 50)}, want: map[string]float64{"a": 49.25, "b": 49.25}}, // 0.985 / 2
		{name: "tiny launch-bound 30 beside compute-bound 60", specs: []tenantSpec{tiny("a", 30), long(compute("b", 60))}, want: map[string]float64{"a": 30, "b": 60}},
		{name: "tiny launch-bound 50 beside compute-bound 50", specs: []tenantSpec{tiny("a", 50), long(compute("b", 50))}, want: map[string]float64{"a": 49.25, "b": 49.25}},
		{name: "cost model 8x off, both start at once", // a: 1 warp per block, b: 8; same GPU time per block
			specs: []tenantSpec{{name: "a", cores: 30, grid: 2000, block: 32, secs: diffSecs}, long(compute("b", 60))}, want: map[string]float64{"a": 30, "b": 60}},
		{name: "CUDA graphs beside plain launches", specs: []tenantSpec{graph("a", 30), long(compute("b", 60))}, want: map[string]float64{"a": 30, "b": 60}},
		{name: "memsets beside plain launches", // a's memsets are GPU time its launches do not count
			specs: []tenantSpec{func() tenantSpec { s := long(compute("a", 30)); s.memsetKiB = 1 << 20; return s }(), long(compute("b", 60))},
			want:  map[string]float64{"a": 30, "b": 60}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := retry(t, func() map[string]float64 { return scenario(t, tt.specs, 0) },
				func(got map[string]float64) bool { return near(got, tt.want, 3) })
			within(t, got, tt.want, 3)
		})
	}
}

// TestClosedLoopForeignLoad: a process that does not load libvcuda (no
// tenant owns it) takes a fifth of the GPU; the tenants share what it leaves
// of the headroom in proportion to their targets, and it is reported.
func TestClosedLoopForeignLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("closed loop on the fake driver: seconds per scenario")
	}
	specs := []tenantSpec{compute("a", 30).at(0, diffSecs), compute("b", 60).at(0, diffSecs),
		{name: "foreign", foreign: true, grid: 200, block: 256, duty: 0.2, secs: diffSecs}}
	want := map[string]float64{"a": 26.2, "b": 52.3} // (98.5 - 20) × 30/90, × 60/90
	got := retry(t, func() outcome { return run(t, specs, 0) },
		func(o outcome) bool { return near(o.shares, want, 3) && math.Abs(o.foreign-20) <= 5 })
	within(t, got.shares, want, 3)
	t.Logf("fake driver: foreign process %.1f%% of the GPU, reported foreign load %.1f%%", got.shares["foreign"], got.foreign)
	if math.Abs(got.foreign-20) > 5 {
		t.Errorf("reported foreign load %.1f%%, want the foreign process's ~20%% (±5)", got.foreign)
	}
}

// TestClosedLoopRewoundCounter: something in a's container rewinds its
// launched counter every second. Each rewind is caught (an error charged as
// what a was allowed, not a fresh start) and b keeps its share.
func TestClosedLoopRewoundCounter(t *testing.T) {
	if testing.Short() {
		t.Skip("closed loop on the fake driver: seconds per scenario")
	}
	a := compute("a", 30).at(0, 8)
	a.rewind = true
	specs := []tenantSpec{a, compute("b", 60).at(0, 8)}
	got := retry(t, func() outcome { return run(t, specs, 0) },
		func(o outcome) bool { return math.Abs(o.shares["b"]-60) <= 3 && o.rewinds["a"] > 0 })
	t.Logf("fake driver: rewinding a %.1f (target 30), b %.1f (want 60), rewinds caught: a %d, b %d",
		got.shares["a"], got.shares["b"], got.rewinds["a"], got.rewinds["b"])
	if math.Abs(got.shares["b"]-60) > 3 {
		t.Errorf("b got %.1f%% beside a tenant rewinding its counter, want 60 ± 3", got.shares["b"])
	}
	if got.rewinds["a"] == 0 || got.rewinds["b"] != 0 {
		t.Errorf("rewinds caught: a %d, b %d; want a > 0 (rewound every second), b 0", got.rewinds["a"], got.rewinds["b"])
	}
}

// TestClosedLoopSingleTenant: one container alone on the GPU, 10..90%.
func TestClosedLoopSingleTenant(t *testing.T) {
	if testing.Short() {
		t.Skip("closed loop on the fake driver: seconds per scenario")
	}
	type result struct {
		sum   float64
		parts []string
	}
	r := retry(t, func() result {
		var r result
		for _, target := range []int{10, 30, 50, 70, 90} {
			got := scenario(t, []tenantSpec{compute("a", target).at(0, 4)}, 0)["a"]
			r.sum += math.Abs(got - float64(target))
			r.parts = append(r.parts, fmt.Sprintf("%d->%.1f", target, got))
		}
		return r
	}, func(r result) bool { return r.sum/5 <= 2 })
	sum, parts := r.sum, r.parts
	t.Logf("fake driver, one container: %s, mean abs error %.2f points", strings.Join(parts, " "), sum/5)
	if sum/5 > 2 {
		t.Errorf("mean absolute error %.2f points > 2: %s", sum/5, strings.Join(parts, " "))
	}
}

// TestClosedLoopBalance: a balance tenant alone takes the idle GPU, and gives
// it back when a fixed neighbour starts: its process runs 0-9 s, the
// neighbour's 3-9 s, both measured over their second halves (after the start).
func TestClosedLoopBalance(t *testing.T) {
	if testing.Short() {
		t.Skip("closed loop on the fake driver: seconds per scenario")
	}
	a := compute("a", 30).at(0, 4)
	a.policy = api.ComputeBalance
	alone := retry(t, func() map[string]float64 { return scenario(t, []tenantSpec{a}, 0) },
		func(got map[string]float64) bool { return got["a"] >= 90 })
	t.Logf("fake driver: balance 30%% alone %.1f", alone["a"])
	if alone["a"] < 90 {
		t.Errorf("balance tenant alone got %.1f%%, want the idle GPU (>= 90)", alone["a"])
	}
	a = a.at(0, 9)
	want := map[string]float64{"a": 48.5, "b": 50} // a: 30 + (98.5 - 80)
	got := retry(t, func() map[string]float64 {
		return scenario(t, []tenantSpec{a, compute("b", 50).at(3*time.Second, 6)}, 0)
	}, func(got map[string]float64) bool { return near(got, want, 3) })
	within(t, got, want, 3)
}

// TestClosedLoopDeepQueues: the GPU queues half a second of work before a
// launch blocks, as a real one queues ~1000 launches. While the queue
// fills, a tenant's first per-process samples pair its units with GPU time
// that has not run yet; two tenants of one program were once taken for
// different programs (a 99, b 186 ns per unit, true 125) and one attempt in
// two or three missed (a 34-37 or 28 for 30, fake driver, issue 21), so the
// case stayed out of the suite. With the cost fit and attribution as they
// are now it holds: nine runs of 10 s, a 29.8-30.1 + b 59.6-60.0 (fake
// driver, 2026-11-30; three more with no queue bound in libvcuda, the same).
func TestClosedLoopDeepQueues(t *testing.T) {
	if testing.Short() {
		t.Skip("closed loop on the fake driver: seconds per scenario")
	}
	want := map[string]float64{"a": 30, "b": 60}
	got := retry(t, func() map[string]float64 {
		return scenario(t, []tenantSpec{deep(compute("a", 30)).at(0, 10), deep(compute("b", 60)).at(0, 10)}, 0)
	}, func(got map[string]float64) bool { return near(got, want, 3) })
	within(t, got, want, 3)
}

// TestClosedLoopTimeSlices: the fake GPU time-slices the tenants' contexts
// (2 ms slices, 40 µs switches that no tenant owns) instead of running one
// FIFO timeline, and a tenant's deep queue no longer holds the other's
// kernels back.
func TestClosedLoopTimeSlices(t *testing.T) {
	if testing.Short() {
		t.Skip("closed loop on the fake driver: seconds per scenario")
	}
	long := func(s tenantSpec) tenantSpec { s.secs = diffSecs; return s }
	tests := []struct {
		name  string
		specs []tenantSpec
		want  map[string]float64
	}{
		{name: "one program 30+60", specs: []tenantSpec{sliced(compute("a", 30)), sliced(compute("b", 60))}, want: map[string]float64{"a": 30, "b": 60}},
		// Different programs on the H100's per-process samples (±20
		// points): 7 of 13 first attempts held with the samples' costs
		// alone (misses a 26.4-27.0, 2026-11-30); with the fit over the
		// turns ruling once it splits them, 8 of 8 (a 27.9-30.3).
		{name: "elementwise 30 beside gemm 60", specs: []tenantSpec{sliced(elementwise("a", 30)), sliced(gemm("b", 60))}, want: map[string]float64{"a": 30, "b": 60}},
		{name: "one program 30+60, short kernels", specs: []tenantSpec{sliced(short(compute("a", 30))), sliced(short(compute("b", 60)))}, want: map[string]float64{"a": 30, "b": 60}},
		{name: "one program 30+60, deep queues", specs: []tenantSpec{sliced(deep(long(compute("a", 30)))), sliced(deep(long(compute("b", 60))))}, want: map[string]float64{"a": 30, "b": 60}},
		// Two processes of a's container, each bounding only its own queue
		// in a's slot: with the slot alone they spill past its end (42.1 for
		// 30, node_slot_bounds_queue); the controller holds the container's
		// share, its processes' sum (fake driver: 30.0 and 29.9 for 30).
		{name: "two processes of a 30 beside 60, deep queues", specs: []tenantSpec{
			sliced(deep(compute("a", 30).at(0, 10))), sliced(deep(compute("a", 30).in("a", "a2").at(0, 10))), sliced(deep(compute("b", 60).at(0, 10)))},
			want: map[string]float64{"a": 30, "b": 60}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := retry(t, func() map[string]float64 { return perContainer(tt.specs, scenario(t, tt.specs, 0)) },
				func(got map[string]float64) bool { return near(got, tt.want, 3) })
			within(t, got, tt.want, 3)
		})
	}
}

// perContainer sums the shares of each container's processes, keyed by the
// container (its first process's name).
func perContainer(specs []tenantSpec, got map[string]float64) map[string]float64 {
	sum := map[string]float64{}
	for _, s := range specs {
		c := s.container
		if c == "" {
			c = s.name
		}
		sum[c] += got[s.name]
	}
	return sum
}

// TestClosedLoopControllerDies: the node controller stops 4 s into the run;
// every container holds the fixed rate it was last given (the share at the
// cost learned by then), measured over 5-10 s.
func TestClosedLoopControllerDies(t *testing.T) {
	if testing.Short() {
		t.Skip("closed loop on the fake driver: seconds per scenario")
	}
	want := map[string]float64{"a": 30, "b": 60}
	got := retry(t, func() map[string]float64 {
		return scenario(t, []tenantSpec{compute("a", 30).at(0, 10), compute("b", 60).at(0, 10)}, 4*time.Second)
	}, func(got map[string]float64) bool { return near(got, want, 3) })
	within(t, got, want, 3)
}
