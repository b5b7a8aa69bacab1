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
