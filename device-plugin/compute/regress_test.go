package compute

import (
	"math"
	"testing"
)

// turns builds n windows of 200 ms in which tenants with costs (ns per
// unit) launch at the rates that hold their shares at the cost the
// controller assumes (0: their own), the excitation lending d of the GPU to
// one tenant at a time for phase windows; busy is read in whole percents,
// as NVML gives it, and capped at the window.
func turns(n, phase int, costs map[string]float64, assumed float64, shares map[string]float64, keys []string, d float64) []observation {
	const P = 200e6
	var out []observation
	for w := range n {
		boosted := keys[(w/phase)%len(keys)]
		units := map[string]float64{}
		var busy float64
		for _, key := range keys {
			s := shares[key] - d
			if key == boosted {
				s = shares[key] + d*float64(len(keys)-1)
			}
			c := costs[key]
			if assumed > 0 {
				c = assumed
			}
			units[key] = s * P / c
			busy += units[key] * costs[key]
		}
		busy = math.Min(math.Round(100*busy/P), 100) / 100 * P
		out = append(out, observation{busy: busy, period: P, saturated: busy >= saturatedAt*P, units: units, steady: true, clean: w%phase != 0, phase: uint64(w / phase)})
	}
	return out
}

func TestRegress(t *testing.T) {
	keys := []string{"a", "b"}
	two := map[string]float64{"a": 1000, "b": 125}
	one := map[string]float64{"a": 125, "b": 125}
	pair := map[string]float64{"a": 0.3, "b": 0.6}
	type regressCase struct {
		name  string
		obs   []observation
		keys  []string
		apart bool
		known bool               // costs returned (well determined)
		want  map[string]float64 // within tol (3% if 0), when set
		tol   float64
	}
	tests := []regressCase{
		{name: "two programs taking turns", obs: turns(40, 10, two, 0, pair, keys, 0.09), keys: keys,
			apart: true, known: true, want: two},
		{name: "one program taking turns: the pooled cost stays", obs: turns(40, 10, one, 0, pair, keys, 0.09), keys: keys,
			known: true, want: one},
		{name: "three programs taking turns", obs: turns(60, 10, map[string]float64{"a": 1000, "b": 125, "c": 3788}, 0,
			map[string]float64{"a": 0.2, "b": 0.3, "c": 0.4}, []string{"a", "b", "c"}, 0.06), keys: []string{"a", "b", "c"},
			apart: true, known: true, want: map[string]float64{"a": 1000, "b": 125, "c": 3788}},
		{name: "steady rates tell nothing", obs: turns(40, 10, two, 0, pair, keys, 0), keys: keys},
		{name: "too few windows", obs: turns(6, 3, two, 0, pair, keys, 0.09), keys: keys},
		{name: "windows across a switch are left out", obs: func() []observation {
			// the first window of a phase counts launches at the new
			// targets and shows the busy time of the old ones (rates set
			// for one pooled cost: the GPU's load moves with the turns)
			o := turns(40, 4, two, 1000, pair, keys, 0.09)
			for i := range o {
				if !o[i].clean && i > 0 {
					o[i].busy = o[i-1].busy
				}
			}
			return o
		}(), keys: keys, apart: true, known: true, want: two, tol: 0.15}, // b's work is a twentieth of the GPU there: whole percents
		{name: "queues split a saturated GPU: units do not move", obs: func() []observation {
			var o []observation
			for range 40 {
				o = append(o, observation{busy: 200e6, period: 200e6, saturated: true, steady: true, clean: true,
					units: map[string]float64{"a": 100000, "b": 800000}})
			}
			o[7].units = map[string]float64{"a": 100100, "b": 799000}
			return o
		}(), keys: keys},
		{name: "a sliver beside a tenant that fills the GPU: at the floor", obs: sliverRows(4), keys: keys, apart: true, known: true},
		{name: "a sliver within one phase: the turns have not confirmed it", obs: sliverRows(1), keys: keys, known: true},
		{name: "one program on a saturated GPU, a queue swinging within a phase: not apart", obs: func() []observation {
			// 20 ms queued at 128 ns per unit (simulated, 166 ms samples):
			// b's units swing with its queue, a's are held by its rate; least
			// squares read 255 and 6.4 ns per unit and took b for a sliver
			var o []observation
			for _, b := range []float64{784000, 784000, 777600, 668800, 811200, 832000, 804800, 784000} {
				o = append(o, observation{busy: 200e6, period: 200e6, saturated: true, steady: true, clean: true,
					units: map[string]float64{"a": 784000, "b": b}})
			}
			o[2].units["a"], o[6].units["a"] = 785600, 785600
			return o
		}(), keys: keys, known: true},
		{name: "one program on a saturated GPU, queues swinging across turns: not apart", obs: queuedPair(), keys: keys, known: true},
		{name: "one program filling deep queues through two phases: not apart", obs: func() []observation {
			// PyTorch-like matmuls never synchronized, 64 queued (107 ms; the
			// simulated H200): a's queue was full, b's filled over the two
			// phases, and their means put them 38 times apart (1828 and 48
			// ns per unit) with no third point to contradict it
			var o []observation
			for i, r := range [][2]float64{{112000, 102000}, {110000, 88000}, {114000, 86000}, {110000, 86000}, {112000, 84000},
				{112000, 108000}, {114000, 110000}, {112000, 116000}} {
				o = append(o, observation{busy: 200e6, period: 200e6, saturated: true, steady: true, clean: true, phase: uint64(i / 5),
					units: map[string]float64{"a": r[0], "b": r[1]}})
			}
			return o
		}(), keys: keys, known: true},
		{name: "a start's backlog: a cost longer than the GPU was busy", obs: func() []observation {
			// two tenants of one program (1000 ns per unit), half a second
			// queued, samples 200 ms late (simulated): the first windows
			// ran what was queued before they were held to a rate; least
			// squares put a at 14,341 and b below nothing
			rows := [][4]float64{{1, 28000, 22000, 1}, {1, 24000, 18000, 1}, {1, 20000, 18000, 1}, {0.75, 18000, 16000, 1},
				{0.15, 18000, 12000, 1}, {0.35, 30000, 40000, 2}, {0.46, 40000, 52000, 2}, {0.64, 56000, 70000, 2},
				{0.81, 72000, 90000, 2}, {0.95, 82000, 104000, 2}, {1, 90000, 112000, 2}}
			var o []observation
			for _, r := range rows {
				o = append(o, observation{busy: r[0] * 200e6, period: 200e6, saturated: r[0] >= saturatedAt, steady: true, clean: true,
					phase: uint64(r[3]), units: map[string]float64{"a": r[1], "b": r[2]}})
			}
			return o
		}(), keys: keys},
		{name: "a poorly determined cost near the pooled one: no fit", obs: func() []observation {
			// b does a fiftieth of the GPU's work at about a's cost, and the
			// busy time has a few points of noise: b's cost could be anything
			// from nothing to twice a's
			var o []observation
			for w := range 40 {
				a := 0.6 * 200e6 / 125 * (1 + 0.1*float64(w%2))
				b := 0.02 * 200e6 / 150 * (1 + 0.5*float64((w/2)%2))
				busy := a*125 + b*150 + float64((w*7)%5-2)*0.02*200e6
				o = append(o, observation{busy: busy, period: 200e6, steady: true, clean: true, units: map[string]float64{"a": a, "b": b}})
			}
			return o
		}(), keys: keys},
	}
	// windows of three tenants of one program (125 ns per unit) whose loop
	// swung in and out of saturation, samples 200 ms late and 40 µs
	// switches (simulated): fitted 128, 95 and 147 ns per unit, b and c
	// 3.1 standard errors apart, and the split gave 19.7 + 33.8 + 35.5
	// for 20 + 30 + 40
	swung := func() []observation {
		rows := [][4]float64{{1, 496, 544, 608}, {1, 528, 576, 544}, {1, 544, 528, 528}, {1, 448, 528, 576},
			{0.95, 336, 368, 768}, {1, 304, 624, 720}, {1, 320, 608, 672}, {1, 320, 608, 672}, {0.94, 256, 496, 704},
			{0.69, 208, 432, 464}, {0.59, 176, 368, 384}, {0.99, 304, 640, 672}, {1, 336, 672, 656},
			{0.83, 224, 384, 688}, {0.65, 192, 320, 512}}
		var o []observation
		for _, r := range rows {
			o = append(o, observation{busy: r[0] * 200e6, period: 200e6, saturated: r[0] >= saturatedAt, steady: true, clean: true,
				units: map[string]float64{"a": r[1] * 1000, "b": r[2] * 1000, "c": r[3] * 1000}})
		}
		return o
	}()
	tests = append(tests, regressCase{name: "one program, a loop swinging into saturation: not apart", obs: swung, keys: []string{"a", "b", "c"}, known: true})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEstimator(window)
			e.obs = tt.obs
			got, apart := e.regress(tt.keys)
			if apart != tt.apart || (got != nil) != tt.known {
				t.Fatalf("regress = %v, apart %v; want apart %v, costs %v", got, apart, tt.apart, tt.known)
			}
			tol := tt.tol
			if tol == 0 {
				tol = 0.03
			}
			for key, w := range tt.want {
				if math.Abs(got[key]/w-1) > tol {
					t.Errorf("%s: %.1f ns per unit, want %.0f", key, got[key], w)
				}
			}
		})
	}
}

// The sliver's cost is the floor: a fraction of the pooled cost, so that the
// tenant is given rate and the next fits see its work.
func TestRegressSliverAtTheFloor(t *testing.T) {
	e := newEstimator(window)
	e.obs = sliverRows(4)
	got, _ := e.regress([]string{"a", "b"})
	var busy, units float64
	for _, o := range e.obs {
		busy += o.busy
		units += o.units["a"] + o.units["b"]
	}
	if floor := minCost * busy / units; math.Abs(got["b"]/floor-1) > 1e-6 {
		t.Errorf("b: %.2f ns per unit, want the floor %.2f", got["b"], floor)
	}
	if math.Abs(got["a"]/3788-1) > 0.03 {
		t.Errorf("a: %.1f ns per unit, want 3788", got["a"])
	}
}

// sliverRows: a GEMM's queue fills what an elementwise tenant (3.75 ns per
// unit, one kernel of 80,000 units now and then) leaves, over phases of 10
// windows; on its turns (odd phases) the elementwise tenant launches one
// kernel a window more.
func sliverRows(phases int) []observation {
	var o []observation
	for w := range 10 * phases {
		b := float64(w%3+(w/10)%2) * 80000
		o = append(o, observation{busy: 200e6, period: 200e6, saturated: true, steady: true, clean: true, phase: uint64(w / 10),
			units: map[string]float64{"a": (200e6 - 3.75*b) / 3788, "b": b}})
	}
	return o
}

// queuedPair: two tenants of one program (128 ns per unit) fill a GPU that
// time-slices them, whatever the turns lend (each ran 780,000 units a
// window); b's launches block on its queue of up to 20 ms (156,000 units),
// so it launched what ran plus its queue's change; a is held by its rate.
func queuedPair() []observation {
	var o []observation
	q := 80000.0
	for w := range 30 {
		next := float64((w*7919)%13) / 12 * 156000 // the queue at the window's end
		o = append(o, observation{busy: 200e6, period: 200e6, saturated: true, steady: true, clean: true, phase: uint64(w / 10),
			units: map[string]float64{"a": 780000 + float64(w%2)*1600, "b": 780000 + next - q}})
		q = next
	}
	return o
}

func TestInvert(t *testing.T) {
	inv, ok := invert([][]float64{{4, 2}, {2, 3}})
	if !ok {
		t.Fatal("a regular matrix read as singular")
	}
	want := [][]float64{{0.375, -0.25}, {-0.25, 0.5}}
	for i := range want {
		for j := range want[i] {
			if math.Abs(inv[i][j]-want[i][j]) > 1e-12 {
				t.Errorf("inv[%d][%d] = %g, want %g", i, j, inv[i][j], want[i][j])
			}
		}
	}
	if _, ok := invert([][]float64{{1, 2}, {2, 4}}); ok {
		t.Error("a singular matrix inverted")
	}
	if _, ok := invert([][]float64{{0, 0}, {0, 0}}); ok {
		t.Error("zeros inverted")
	}
}

// atMeanClock takes every row's busy time at the mean clock of the rows
// that have one, and leaves a row without a clock reading as it is.
func TestAtMeanClock(t *testing.T) {
	tests := []struct {
		name   string
		clocks []float64
		busy   []float64
		want   []float64
	}{
		{name: "a window at 1.2 times the clock did 1.2 times the work per busy ns", clocks: []float64{1500, 1800}, busy: []float64{100, 50},
			want: []float64{100 * 1500 / 1650.0, 50 * 1800 / 1650.0}},
		{name: "one clock throughout: as seen", clocks: []float64{1473, 1473}, busy: []float64{100, 50}, want: []float64{100, 50}},
		{name: "a window without a clock reading: as seen, the others at their mean", clocks: []float64{1500, 0, 1800}, busy: []float64{100, 50, 50},
			want: []float64{100 * 1500 / 1650.0, 50, 50 * 1800 / 1650.0}},
		{name: "no clock read: as seen", clocks: []float64{0, 0}, busy: []float64{100, 50}, want: []float64{100, 50}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rows := make([]observation, len(tt.busy))
			for i := range rows {
				rows[i] = observation{busy: tt.busy[i], clock: tt.clocks[i]}
			}
			got := atMeanClock(rows)
			for i := range got {
				if math.Abs(got[i].busy-tt.want[i]) > 1e-9 {
					t.Errorf("row %d: busy %.4f, want %.4f", i, got[i].busy, tt.want[i])
				}
				if rows[i].busy != tt.busy[i] {
					t.Errorf("row %d of the estimator's own rows changed: %.4f", i, rows[i].busy)
				}
			}
		})
	}
}

func TestDrained(t *testing.T) {
	// w: a window of 200 ms, seq s, phase p, busy b ms, units of a
	w := func(s, p uint64, b, a float64) observation {
		return observation{busy: b * 1e6, period: 200e6, saturated: b >= saturatedAt*200, units: map[string]float64{"a": a},
			steady: true, clean: true, phase: p, seq: s}
	}
	tests := []struct {
		name string
		in   []observation
		want []float64 // busy (ms) of the rows out
	}{
		{name: "unsaturated windows stay", in: []observation{w(1, 1, 100, 1), w(2, 1, 120, 1)}, want: []float64{100, 120}},
		{name: "a run joins the window that drains it",
			in:   []observation{w(1, 1, 100, 1), w(2, 1, 195, 1), w(3, 1, 195, 1), w(4, 1, 150, 1), w(5, 1, 100, 1)},
			want: []float64{100, 540, 100}},
		{name: "a run at the phase's end stays as its windows",
			in:   []observation{w(1, 1, 100, 1), w(2, 1, 195, 1), w(3, 1, 195, 1), w(4, 2, 150, 1)},
			want: []float64{100, 195, 195, 150}},
		{name: "not across a gap (a window left out)",
			in:   []observation{w(1, 1, 195, 1), w(3, 1, 150, 1)},
			want: []float64{195, 150}},
		{name: "saturated throughout", in: []observation{w(1, 1, 195, 1), w(2, 1, 195, 1)}, want: []float64{195, 195}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := drained(tt.in)
			var busy []float64
			for _, o := range got {
				busy = append(busy, o.busy/1e6)
			}
			if len(busy) != len(tt.want) {
				t.Fatalf("rows %v, want %v", busy, tt.want)
			}
			for i := range busy {
				if math.Abs(busy[i]-tt.want[i]) > 1e-9 {
					t.Fatalf("rows %v, want %v", busy, tt.want)
				}
			}
			var units, period float64
			for _, o := range got {
				units += o.units["a"]
				period += o.period
			}
			if units != float64(len(tt.in)) || period != 200e6*float64(len(tt.in)) {
				t.Errorf("units %v, period %v: every window's are kept", units, period)
			}
		})
	}
}

func TestExplains(t *testing.T) {
	// windows of two tenants whose units vary apart, busy = 100·a + 800·b
	// (ns per unit), and one window off by noise
	var rows []observation
	for i, u := range [][2]float64{{1000, 100}, {400, 120}, {900, 40}, {200, 200}, {700, 90}, {300, 150}} {
		busy := 100*u[0] + 800*u[1]
		if i == 2 {
			busy *= 1.02
		}
		rows = append(rows, observation{busy: busy, period: 200e6, units: map[string]float64{"a": u[0], "b": u[1]}})
	}
	var busy, units float64
	for _, o := range rows {
		busy += o.busy
		units += o.units["a"] + o.units["b"]
	}
	pooled := busy / units
	tests := []struct {
		name     string
		costs    map[string]float64
		min, max float64
	}{
		{name: "the true costs explain nearly all that one cost leaves", costs: map[string]float64{"a": 100, "b": 800}, max: 0.01},
		{name: "the pooled cost for both explains nothing more", costs: map[string]float64{"a": pooled, "b": pooled}, min: 0.999, max: 1.001},
		{name: "costs the wrong way round explain less than one cost", costs: map[string]float64{"a": 800, "b": 100}, min: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := explains(tt.costs, rows)
			if got < tt.min || (tt.max > 0 && got > tt.max) {
				t.Errorf("explains = %.3f, want in [%g, %g]", got, tt.min, tt.max)
			}
		})
	}
}
