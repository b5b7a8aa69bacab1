package compute

import (
	"math"
	"testing"
)

// swingingPair: PyTorch-like a (835 ns per unit at 1500 MHz, a quarter of
// its time bound by memory) at 60 beside an elementwise b (0.1404 ns per
// unit, bound by memory) at 30, taking turns (d 0.05, phases of 10
// windows of 200 ms), the clock swinging with a's part of the load as a
// power-capped card's does (the simulated H200: 1750-2040 MHz), each
// window's units what ran; clock(w) overrides the clock where set.
func swingingPair(clock func(w int) float64) []observation {
	const P = 200e6
	var o []observation
	prev := 0.6
	for w := range 60 {
		phase := uint64(w / 10)
		sa := 0.65
		if phase%2 == 1 {
			sa = 0.55
		}
		sa += 0.02 * float64((w*7919)%5-2) // the loop's own ripple
		sb := 0.9 - sa
		// the clock follows the load of the last 100 ms, not the window's
		c := 2040 - 2900*(prev-0.55) + 20*float64((w*104729)%7-3)
		prev = sa
		if clock != nil {
			c = clock(w)
		}
		ca := 835 * (0.25 + 0.75*1500/c)
		o = append(o, observation{busy: 0.9 * P, period: P, steady: true, clean: w%10 != 0, phase: phase, clock: c,
			seq: uint64(w + 1), units: map[string]float64{"a": sa * P / ca, "b": sb * P / 0.1404}})
	}
	return o
}

func TestClockCosts(t *testing.T) {
	keys := []string{"a", "b"}
	meanClock := func(o []observation) float64 {
		var s float64
		for _, w := range o {
			s += w.clock
		}
		return s / float64(len(o))
	}
	t.Run("a memory-bound tenant beside a GEMM, the clock swinging with the load", func(t *testing.T) {
		o := swingingPair(nil)
		m := meanClock(o)
		want := map[string]float64{"a": 835 * (0.25 + 0.75*1500/m), "b": 0.1404}
		got := clockCosts(keys, o)
		if got == nil {
			t.Fatal("nil")
		}
		for k, c := range want {
			if math.Abs(got[k]/c-1) > 0.02 {
				t.Errorf("%s: %.4g ns per unit, want %.4g ± 2%%", k, got[k], c)
			}
		}
		// what taking every kernel as bound by the clock does (the failure
		// this guards)
		all, _ := fitRows(keys, atMeanClock(o), atMeanClock(o))
		if r := all["a"] / all["b"] / (want["a"] / want["b"]); math.Abs(r-1) < 0.05 {
			t.Errorf("at the mean clock the costs' ratio is off by only %.1f%%: the case no longer shows the error", 100*(r-1))
		}
	})
	t.Run("a power of the clock no kernel has", func(t *testing.T) {
		// the busy time going as the inverse cube of the clock, the units
		// as they were
		o := swingingPair(nil)
		m := meanClock(o)
		for i := range o {
			o[i].busy *= 0.7 * math.Pow(m/o[i].clock, 3)
		}
		if got := clockCosts(keys, o); got != nil {
			t.Errorf("%v, want nil", got)
		}
	})
	for _, tt := range []struct {
		name  string
		clock func(w int) float64
	}{
		{name: "a clock that does not swing tells nothing", clock: func(int) float64 { return 1980 }},
		{name: "a clock that swings by less than clockSwing", clock: func(w int) float64 { return 1980 + float64(w%3) }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := clockCosts(keys, swingingPair(tt.clock)); got != nil {
				t.Errorf("%v, want nil", got)
			}
		})
	}
}
