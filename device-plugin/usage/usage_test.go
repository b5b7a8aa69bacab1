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
	// First period: sets the averages, accumulates nothing (no length yet).
	tr.Observe(u, 0.9, []Sample{dec("a", 0.3, 0.3, true), dec("b", 0.7, 0.6, false)})
	// 100 periods of 100 ms: a at 0.25, b at 0.65, GPU at 0.9.
	for range 100 {
		c.t = c.t.Add(100 * time.Millisecond)
		tr.Observe(u, 0.9, []Sample{dec("a", 0.3, 0.25, true), dec("b", 0.7, 0.65, false)})
	}
	g, _ := tr.GPU(u)
	a, _ := tr.Tenant(u, "a")
	b, _ := tr.Tenant(u, "b")
	for _, tc := range []struct {
		name      string
		got, want float64
	}{
		{"GPU busy average", g.Busy, 0.9},
		{"GPU busy seconds: 10 s at 0.9", g.BusySeconds, 9},
		// 0.3 → 0.25 over 10 s = 5 τ: e^-5 of the step left
		{"a's average follows within e^-5", a.Achieved, 0.25 + 0.05*math.Exp(-5)},
		{"a's busy seconds: 10 s at 0.25", a.BusySeconds, 2.5},
		{"b's target", b.Target, 0.7},
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
