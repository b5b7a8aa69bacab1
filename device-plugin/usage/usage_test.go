package usage

import (
	"math"
	"testing"
	"time"
)

type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time { return c.t }

func TestTracker(t *testing.T) {
	c := &fakeClock{t: time.Unix(1000, 0)}
	tr := NewTracker(c.now)
	const u = "GPU-1"
	dec := func(key string, share, measured float64, limited bool) Sample {
		return Sample{Key: key, Target: share, Measured: measured, Limited: limited}
	}
	// First period: starts the averages, accumulates nothing (no length yet).
	tr.Observe(u, 0.9, []Sample{dec("a", 0.3, 0.3, true), dec("b", 0.7, 0.6, false)})
	// 100 periods of 100 ms: a at 0.3, then 100 at 0.25; b at 0.65, GPU at 0.9.
	for i := range 200 {
		c.t = c.t.Add(100 * time.Millisecond)
		ma := 0.3
		if i >= 100 {
			ma = 0.25
		}
		tr.Observe(u, 0.9, []Sample{dec("a", 0.3, ma, true), dec("b", 0.7, 0.65, false)})
	}
	// c starts now: its first period measures nothing (its launches had not
	// run yet), then 3 s at 0.3.
	for i := range 30 {
		c.t = c.t.Add(100 * time.Millisecond)
		mc := 0.3
		if i == 0 {
			mc = 0
		}
		tr.Observe(u, 0.9, []Sample{dec("a", 0.3, 0.25, true), dec("b", 0.7, 0.65, false), dec("c", 0.3, mc, true)})
	}
	g, _ := tr.GPU(u)
	a, _ := tr.Tenant(u, "a")
	b, _ := tr.Tenant(u, "b")
	cc, _ := tr.Tenant(u, "c")
	e := func(x float64) float64 { return math.Exp(-x) }
	for _, tc := range []struct {
		name      string
		got, want float64
	}{
		{"GPU busy average", g.Busy, 0.9},
		{"GPU busy seconds: 23 s at 0.9", g.BusySeconds, 0.9 * 23},
		// 0.3 for 10 s (5 τ), then 0.25 for 13 s (6.5 τ): the mean of 23 s
		// of periods, the older 10 s weighted e^-6.5
		{"a's average follows the step", a.Achieved, (0.3*(1-e(5))*e(6.5) + 0.25*(1-e(6.5))) / (1 - e(11.5))},
		{"a's busy seconds: 10 s at 0.3, 13 s at 0.25", a.BusySeconds, 3 + 3.25},
		{"b's target", b.Target, 0.7},
		// 3 s old: the mean of its own periods (0 for the first 100 ms), not
		// an average that started at 0 (which reads 0.23 here)
		{"c, 3 s old, reads its own mean", cc.Achieved, 0.3 * (1 - e(1.45)) / (1 - e(1.5))},
		{"c's busy seconds: 2.9 s at 0.3", cc.BusySeconds, 0.87},
	} {
		if !(math.Abs(tc.got-tc.want) < 1e-6) {
			t.Errorf("%s: %v, want %v", tc.name, tc.got, tc.want)
		}
	}
	if !a.Limited || b.Limited {
		t.Errorf("limited: a %v, b %v; want a limited, b not", a.Limited, b.Limited)
	}
	// Out-of-range reports (an untrusted container can skew attribution) are clamped.
	c.t = c.t.Add(100 * time.Millisecond)
	tr.Observe(u, 7, []Sample{dec("a", 0.3, math.NaN(), true)})
	if g, _ := tr.GPU(u); g.Busy > 1 {
		t.Errorf("busy %v after a report of 7, want at most 1", g.Busy)
	}
	if a, _ := tr.Tenant(u, "a"); math.IsNaN(a.Achieved) || a.Achieved < 0 {
		t.Errorf("achieved %v after a NaN", a.Achieved)
	}
	// b is gone: its series go with it.
	tr.Keep(func(uuid, tenant string) bool { return uuid == u && tenant != "b" })
	if _, ok := tr.Tenant(u, "b"); ok {
		t.Error("b kept after Keep dropped it")
	}
	if _, ok := tr.Tenant(u, "a"); !ok {
		t.Error("a dropped although live")
	}
	tr.Keep(func(string, string) bool { return false })
	if _, ok := tr.GPU(u); ok {
		t.Error("GPU kept after Keep dropped it")
	}
}
