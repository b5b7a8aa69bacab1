package compute

import (
	"math"
	"testing"
)

// TestCalibrationHeldAverage: a tenant's measured cost is read from the held
// (long) average while the recent samples agree with it, and follows a
// program whose cost changed as soon as the recent samples show it.
func TestCalibrationHeldAverage(t *testing.T) {
	const (
		share = 0.3 // of the GPU, what the tenant runs
		units = 1e6 // launched per one-second sample
		span  = 1e9
	)
	// per-process samples off by up to ±20 points, deterministic
	noise := func(i int) float64 {
		x := uint64(i)*0x9e3779b97f4a7c15 + 1
		x ^= x >> 29
		x *= 0xbf58476d1ce4e5b9
		x ^= x >> 32
		return float64(x%41)/100 - 0.2
	}
	tests := []struct {
		name  string
		secs  int
		cost  func(sec int) float64 // true ns per unit at second sec
		check func(t *testing.T, c *calibration, errs []float64, recentErrs []float64)
	}{
		{
			name: "a steady cost is held more precisely than a 15 s average holds it",
			secs: 240,
			cost: func(int) float64 { return share * span / units },
			check: func(t *testing.T, _ *calibration, errs, recentErrs []float64) {
				held, recent := rms(errs[120:]), rms(recentErrs[120:])
				t.Logf("relative error over the last 120 s: held %.3f, recent %.3f", held, recent)
				if held > recent/1.5 {
					t.Errorf("held average's error %.3f, want below two thirds of the recent one's %.3f", held, recent)
				}
			},
		},
		{
			name: "a cost that doubles is followed within 30 s",
			secs: 130,
			cost: func(sec int) float64 {
				if sec >= 100 {
					return 2 * share * span / units
				}
				return share * span / units
			},
			check: func(t *testing.T, c *calibration, _, _ []float64) {
				got, ok := c.cost()
				want := 2 * share * span / units
				t.Logf("30 s after it doubled: %.1f ns per unit (true %.1f)", got, want)
				if !ok || math.Abs(got/want-1) > 0.15 {
					t.Errorf("cost %.1f ns per unit 30 s after it doubled, want %.1f ± 15%%", got, want)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var c calibration
			var errs, recentErrs []float64
			for sec := range tt.secs {
				k := tt.cost(sec)
				busy := (k*units/span + noise(sec)) * span
				c.add(Measured{BusyNs: max(busy, 0), Units: units}, span)
				got, _ := c.cost()
				recent, _ := c.recent.cost()
				errs = append(errs, got/k-1)
				recentErrs = append(recentErrs, recent/k-1)
			}
			tt.check(t, &c, errs, recentErrs)
		})
	}
}

func rms(xs []float64) float64 {
	var s float64
	for _, x := range xs {
		s += x * x
	}
	return math.Sqrt(s / float64(max(len(xs), 1)))
}
