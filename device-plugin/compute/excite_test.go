package compute

import (
	"math"
	"testing"

	"github.com/volcano-vgpu/volcano-vgpu/api"
)

func TestExcitationStep(t *testing.T) {
	shares := map[string]float64{"a": 0.2, "b": 0.3, "c": 0.4}
	sum := func(m map[string]float64) float64 {
		var s float64
		for _, v := range m {
			s += v
		}
		return s
	}
	const s = uint64(1e9)
	t.Run("off: no turns, one tenant, or not unshared", func(t *testing.T) {
		var x excitation
		if got := x.step(s, false, shares, []string{"a", "b"}); got != nil {
			t.Errorf("not unshared: %v", got)
		}
		if got := x.step(s, true, shares, []string{"a"}); got != nil {
			t.Errorf("one tenant: %v", got)
		}
	})
	t.Run("the GPU's load stays; turns rotate every phase", func(t *testing.T) {
		var x excitation
		now := 100 * s
		// d: the smaller of exciteMax and exciteOfMin of the smallest target
		d := math.Min(exciteMax, exciteOfMin*0.2)
		seen := map[string]int{}
		for i := range 3 {
			got := x.step(now+uint64(i)*uint64(excitePhaseNs), true, shares, []string{"c", "a", "b"})
			if math.Abs(sum(got)) > 1e-12 {
				t.Fatalf("phase %d lends %v: sums to %g, want 0", i, got, sum(got))
			}
			for key, v := range got {
				switch {
				case math.Abs(v-2*d) < 1e-12:
					seen[key]++
				case math.Abs(v+d) > 1e-12:
					t.Errorf("phase %d: %s changed by %g, want %g or %g", i, key, v, 2*d, -d)
				}
			}
			at := float64(now + uint64(i)*uint64(excitePhaseNs))
			if x.clean(at-100e6, at+100e6) || x.clean(at+exciteMarginNs/2, at+200e6) || !x.clean(at+exciteMarginNs+1, at+200e6) {
				t.Errorf("phase %d: a window across the switch, or starting within the margin after it, is clean; or one after is not", i)
			}
			if i > 0 && !x.clean(at-300e6, at-exciteMarginNs-1) {
				t.Errorf("phase %d: a window of the last phase, ending before the margin, is not clean", i)
			}
			if got := x.lentAt(at - 1); i > 0 && sameLend(got, x.lentAt(at)) {
				t.Errorf("phase %d: the lend before the switch (%v) is the one after it", i, got)
			}
		}
		if len(seen) != 3 || seen["a"] != 1 || seen["b"] != 1 || seen["c"] != 1 {
			t.Errorf("three phases lent to %v, want each tenant once", seen)
		}
		// within a phase nothing changes
		n := len(x.changes)
		x.step(now+2*uint64(excitePhaseNs)+uint64(excitePhaseNs/2), true, shares, []string{"a", "b", "c"})
		if len(x.changes) != n {
			t.Error("the targets changed within a phase")
		}
	})
	t.Run("a tenant that comes and goes keeps the turns' clock", func(t *testing.T) {
		var x excitation
		x.step(s, true, shares, []string{"a", "b"})
		x.step(s+uint64(excitePhaseNs), true, shares, []string{"a", "b"})
		at := s + uint64(excitePhaseNs) + 1
		got := x.step(at, true, shares, []string{"a", "b", "c"})
		if got["b"] <= 0 || x.changes[len(x.changes)-1].at != at {
			t.Errorf("after a join within b's turn: lends %v (change at %d); want b's turn on, a change at %d", got, x.changes[len(x.changes)-1].at, at)
		}
		if got := x.step(at+1, false, shares, nil); got != nil || x.clean(float64(at)-1, float64(at)+2) || x.lentAt(float64(at)+1) != nil {
			t.Errorf("turned off: lends %v; a window across it is clean: %v; lent after it: %v", got, x.clean(float64(at)-1, float64(at)+2), x.lentAt(float64(at)+1))
		}
		if len(x.changes) > changesKept {
			t.Errorf("%d changes kept, want at most %d", len(x.changes), changesKept)
		}
		// c launches every other period for 60 s: a and b are lent as
		// much as each other (started anew at each return, a's turn came
		// back every time)
		var y excitation
		var lentA, lentB float64
		for p := range 300 {
			members := []string{"a", "b"}
			if p%2 == 1 {
				members = append(members, "c")
			}
			l := y.step(10*s+uint64(p)*200e6, true, shares, members)
			lentA += l["a"]
			lentB += l["b"]
		}
		if d := math.Min(exciteMax, exciteOfMin*0.2); math.Abs(lentA-lentB)/300 > d/4 {
			t.Errorf("lent on average a %.4f, b %.4f of the GPU: want them within %.4f", lentA/300, lentB/300, d/4)
		}
	})
}

func TestExcitable(t *testing.T) {
	tests := []struct {
		name  string
		t     TenantInput
		share float64
		want  bool
	}{
		{name: "fixed share", t: TenantInput{Tenant: Tenant{Share: 0.3, Policy: api.ComputeFixed}}, share: 0.3, want: true},
		{name: "balance with lent capacity", t: TenantInput{Tenant: Tenant{Share: 0.3, Policy: api.ComputeBalance}}, share: 0.5, want: true},
		{name: "best effort", t: TenantInput{Tenant: Tenant{Share: 1}}, share: 0.2},
		{name: "unlimited", t: TenantInput{Tenant: Tenant{Share: 0.3, Policy: api.ComputeNone}}, share: 0.3},
		{name: "alone with balance: the whole GPU", t: TenantInput{Tenant: Tenant{Share: 0.3, Policy: api.ComputeBalance}}, share: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := excitable(tt.t, tt.share); got != tt.want {
				t.Errorf("excitable = %v, want %v", got, tt.want)
			}
		})
	}
}
