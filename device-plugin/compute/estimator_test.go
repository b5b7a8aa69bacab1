package compute

import (
	"math"
	"testing"
)

// A start's window that missed its busy time, then steady saturated windows.
func TestEstimatorStartsOnly(t *testing.T) {
	const P = 200e6
	start := observation{busy: 2e6, period: P, units: map[string]float64{"a": 288000}} // 6.9 ns per unit
	tests := []struct {
		name string
		obs  []observation
		want float64 // a's cost, ns per unit
	}{
		{name: "one tenant: its saturated windows give its cost", want: 125, obs: []observation{start,
			{busy: P, period: P, saturated: true, steady: true, units: map[string]float64{"a": 1.6e6}},
			{busy: P, period: P, saturated: true, steady: true, units: map[string]float64{"a": 1.6e6}}}},
		{name: "one unsaturated steady window: the unsaturated windows rule", want: (2e6 + 0.9*P) / (288000 + 1.44e6), obs: []observation{start,
			{busy: P, period: P, saturated: true, steady: true, units: map[string]float64{"a": 1.6e6}},
			{busy: 0.9 * P, period: P, steady: true, units: map[string]float64{"a": 1.44e6}}}},
		{name: "two tenants: a saturated GPU's split is its queues'", want: 2e6 / 288000, obs: []observation{start,
			{busy: P, period: P, saturated: true, steady: true, units: map[string]float64{"a": 0.8e6, "b": 0.8e6}}}},
		{name: "no steady window yet", want: 2e6 / 288000, obs: []observation{start,
			{busy: P, period: P, saturated: true, units: map[string]float64{"a": 1.6e6}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEstimator(window)
			e.obs = tt.obs
			if got := e.fit([]string{"a"})["a"]; math.Abs(got/tt.want-1) > 1e-9 {
				t.Errorf("a's cost %.2f ns per unit, want %.2f", got, tt.want)
			}
			// the fallback's level is that of the windows the fit pooled
			var busy, units float64
			for _, o := range tt.obs {
				busy += o.busy
				for _, u := range o.units {
					units += u
				}
			}
			if got, want := e.level(), busy/units/tt.want; math.Abs(got/want-1) > 1e-9 {
				t.Errorf("level %.4f, want %.4f", got, want)
			}
		})
	}
}

// TestEstimatorStartsLevel: a pair's start read 8.9 ns per unit (its
// launches' busy time fell between device samples) and every steady window
// after it is saturated: the rate's cost is the steady windows'.
func TestEstimatorStartsLevel(t *testing.T) {
	const P = 200e6
	start := observation{busy: 4e6, period: P, units: map[string]float64{"a": 144000, "b": 144000}} // 13.9 ns per unit
	sat := observation{busy: P, period: P, saturated: true, steady: true, units: map[string]float64{"a": 0.6e6, "b": 1.2e6}}
	tests := []struct {
		name string
		obs  []observation
		want float64
	}{
		{name: "a start's basis far below the saturated steady windows", obs: []observation{start, sat, sat}, want: (P / 1.8e6) / (4e6 / 288000)},
		{name: "an unsaturated steady window in the basis", obs: []observation{start, sat,
			{busy: 0.9 * P, period: P, steady: true, units: map[string]float64{"a": 0.48e6, "b": 0.96e6}}}, want: 1},
		{name: "no steady window yet", obs: []observation{start, {busy: P, period: P, saturated: true, units: sat.units}}, want: 1},
		// saturated windows read low if anything: a basis a little below
		// them is the loop's to correct
		{name: "a basis less than twice below", obs: []observation{
			{busy: 0.35 * P, period: P, units: map[string]float64{"a": 0.3e6, "b": 0.6e6}}, sat}, want: 1},
		{name: "one tenant: its own steady windows are the basis (startsOnly)", obs: []observation{
			{busy: 4e6, period: P, units: map[string]float64{"a": 288000}},
			{busy: P, period: P, saturated: true, steady: true, units: map[string]float64{"a": 1.6e6}}}, want: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEstimator(window)
			e.obs = tt.obs
			if got := e.startsLevel(); math.Abs(got/tt.want-1) > 1e-9 {
				t.Errorf("startsLevel %.4f, want %.4f", got, tt.want)
			}
		})
	}
}

// Windows only a departed tenant launched in are no one's steady windows: a
// pair joining as a 90% tenant left was settled on its windows.
func TestEstimatorForgetClearsSteady(t *testing.T) {
	e := newEstimator(window)
	for range minSettled {
		e.add(0.9*200e6, 200e6, map[string]float64{"x": 1.44e6}, map[string]bool{"x": true}, true, 0, 0)
	}
	if !e.settled() {
		t.Fatal("x's steady windows did not settle the estimate")
	}
	e.forget("x", map[string]float64{"x": 125})
	if e.settled() {
		t.Error("the estimate stays settled on the windows of a tenant that left")
	}
}

// A tenant's own cost pools its solo windows (their sums): each window at a
// limited rate reads what it launched plus its queue's change, and over a run
// the changes cancel. An average of each window's ratio kept them (132 ns per
// unit for a true 125 here).
func TestEstimatorSoloPooled(t *testing.T) {
	const P = 100e6
	e := newEstimator(window)
	steady := map[string]bool{"a": true}
	// 50 ms ran each window; what was launched swung around 400,000 units
	for _, u := range []float64{400e3, 300e3, 500e3, 340e3, 460e3, 400e3} {
		e.add(50e6, P, map[string]float64{"a": u}, steady, true, 0, 0)
	}
	k, ok := e.known("a")
	if !ok || math.Abs(k/125-1) > 0.01 {
		t.Errorf("a's own cost %.1f ns per unit (known %v), want 125 ± 1%%", k, ok)
	}
}

// A solo window right after a saturated one runs the tenant's backlog (a 60%
// tenant read 176 ns per unit for a true 125 after its neighbour left,
// fake driver): it does not count.
func TestEstimatorSoloNotAfterSaturated(t *testing.T) {
	const P = 100e6
	tests := []struct {
		name  string
		first float64 // busy time of the window before the solo run
		want  bool    // a's cost known after minSolo solo windows
	}{
		{name: "after an unsaturated window", first: 0.5 * P, want: true},
		{name: "after a saturated window", first: P, want: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEstimator(window)
			steady := map[string]bool{"a": true}
			e.add(tt.first, P, map[string]float64{"a": 400e3}, steady, true, 0, 0)
			for range minSolo {
				e.add(0.5*P, P, map[string]float64{"a": 400e3}, steady, true, 0, 0)
			}
			if _, ok := e.known("a"); ok != tt.want {
				t.Errorf("a's own cost known: %v, want %v", ok, tt.want)
			}
		})
	}
}

// TestEstimatorBeforeLaunches: the tenants are listed while the previous
// row's solo process runs its last 0.9 of a window (the gpu check on the
// fake driver as the H200: 2360 ns per unit for about 970, and the loop
// swung in and out of saturation once a second). A window before any of
// them launched is no tenant's work; one after they launched is: a backlog
// draining is their cost.
func TestEstimatorBeforeLaunches(t *testing.T) {
	const P = 200e6
	none := map[string]float64{"a": 0, "b": 0}
	run := map[string]float64{"a": 60000, "b": 120000} // 1000 ns per unit at 90% busy
	steady := map[string]bool{"a": true, "b": true}
	tests := []struct {
		name  string
		busy  []float64 // fractions of P, in order
		units []map[string]float64
		want  float64
	}{
		{name: "a departed process's last work before the first launch", busy: []float64{0.89, 0, 0.9, 0.9, 0.9},
			units: []map[string]float64{none, none, run, run, run}, want: 1000},
		{name: "a backlog draining after launches counts", busy: []float64{0.9, 0.9, 0.27},
			units: []map[string]float64{run, run, none}, want: (0.9 + 0.9 + 0.27) * P / 360000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEstimator(window)
			for i, b := range tt.busy {
				e.add(b*P, P, tt.units[i], steady, true, 0, 0)
			}
			if got := e.fit([]string{"a", "b"})["a"]; math.Abs(got/tt.want-1) > 1e-9 {
				t.Errorf("a's cost %.1f ns per unit, want %.1f", got, tt.want)
			}
		})
	}
}
