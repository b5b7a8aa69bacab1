package compute

import (
	"testing"
	"time"

	"github.com/volcano-vgpu/volcano-vgpu/api"
)

func TestSlotPeriodFor(t *testing.T) {
	tests := []struct {
		name string
		P    time.Duration
		want time.Duration
	}{
		{name: "an H100's 100 ms samples: two slot periods", P: 100 * time.Millisecond, want: 50 * time.Millisecond},
		{name: "an H200's 200 ms samples: five", P: 200 * time.Millisecond, want: 40 * time.Millisecond},
		{name: "a period shorter than a slot period: one", P: 15 * time.Millisecond, want: 15 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := time.Duration(slotPeriodFor(float64(tt.P))); got != tt.want {
				t.Errorf("slotPeriodFor(%v) = %v, want %v", tt.P, got, tt.want)
			}
		})
	}
}

func TestAssignSlots(t *testing.T) {
	limited := func(key string, share, lent float64) Decision {
		return Decision{Key: key, Share: share, Lent: lent, Control: api.ControlDevice{Mode: api.ControlLimited, Rate: 1e-3}}
	}
	P := float64(200 * time.Millisecond)
	tests := []struct {
		name    string
		ds      []Decision
		slotted map[string]bool
		want    map[string]api.Slot
	}{
		{name: "two tenants, in key order, as long as their targets",
			ds:      []Decision{limited("b", 0.6, 0), limited("a", 0.3, 0)},
			slotted: map[string]bool{"a": true, "b": true},
			want:    map[string]api.Slot{"a": {PeriodUs: 40000, StartUs: 0, LenUs: 12000}, "b": {PeriodUs: 40000, StartUs: 12000, LenUs: 24000}}},
		{name: "a turn's lent share lengthens its slot",
			ds:      []Decision{limited("a", 0.3, 0.05), limited("b", 0.6, -0.05)},
			slotted: map[string]bool{"a": true, "b": true},
			want:    map[string]api.Slot{"a": {PeriodUs: 40000, StartUs: 0, LenUs: 14000}, "b": {PeriodUs: 40000, StartUs: 14000, LenUs: 22000}}},
		{name: "targets past the whole GPU are scaled to the period",
			ds:      []Decision{limited("a", 0.8, 0), limited("b", 0.8, 0)},
			slotted: map[string]bool{"a": true, "b": true},
			want:    map[string]api.Slot{"a": {PeriodUs: 40000, StartUs: 0, LenUs: 20000}, "b": {PeriodUs: 40000, StartUs: 20000, LenUs: 20000}}},
		{name: "one tenant held to a rate: no slots",
			ds:      []Decision{limited("a", 0.3, 0), {Key: "b", Share: 1, Control: api.ControlDevice{Mode: api.ControlUnlimited}}},
			slotted: map[string]bool{"a": true, "b": true},
			want:    map[string]api.Slot{}},
		{name: "a tenant not slotted (idle) gets none, and is left out",
			ds:      []Decision{limited("a", 0.3, 0), limited("b", 0.3, 0), limited("c", 0.3, 0)},
			slotted: map[string]bool{"a": true, "c": true},
			want:    map[string]api.Slot{"a": {PeriodUs: 40000, StartUs: 0, LenUs: 12000}, "c": {PeriodUs: 40000, StartUs: 12000, LenUs: 12000}}},
		{name: "no rate yet (boot): no slot",
			ds: []Decision{limited("a", 0.3, 0), limited("b", 0.3, 0),
				{Key: "c", Share: 0.3, Control: api.ControlDevice{Mode: api.ControlLimited}}},
			slotted: map[string]bool{"a": true, "b": true, "c": true},
			want:    map[string]api.Slot{"a": {PeriodUs: 40000, StartUs: 0, LenUs: 12000}, "b": {PeriodUs: 40000, StartUs: 12000, LenUs: 12000}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assignSlots(tt.ds, tt.slotted, P)
			for _, d := range tt.ds {
				if got, want := d.Control.Slot, tt.want[d.Key]; got != want {
					t.Errorf("%s: slot %+v, want %+v", d.Key, got, want)
				}
			}
		})
	}
}

// TestSimSlots: pairs on a GPU that switches contexts as slowly as the H200
// did (170 µs: two unlimited tenants got 45.9 + 45.9% of their solo
// rates), with its samples and clocks. Launched whenever their credit came,
// the pair's queues time-sliced: one program of 2 ms kernels at 30 + 60 got
// 26.9 + 59.3, 200 µs kernels beside 2 ms ones 28.9 + 54.8 (simulated). In
// slots they take turns: 30.3 + 60.5 and 28.7 + 58.9.
func TestSimSlots(t *testing.T) {
	cheap := simProgram{units: 1600, kernel: 200 * time.Microsecond, depth: 100}
	dear := simProgram{units: 2000, kernel: 2 * time.Millisecond, depth: 10}
	tests := []struct {
		name   string
		a, b   simProgram
		ta, tb int
		late   time.Duration
	}{
		{name: "one program of 2 ms kernels, 30 + 60", a: dear, b: dear, ta: 30, tb: 60, late: 50 * time.Millisecond},
		{name: "200 us kernels 30 beside 2 ms kernels 60", a: cheap, b: dear, ta: 30, tb: 60, late: 100 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			specs := stretch([]simTenant{simT("a", tt.ta, tt.a), simT("b", tt.tb, tt.b)}, 16.0/12)
			got, _ := simulate(t, specs, simOptions{wholeDevice: true, switchCost: 170 * time.Microsecond,
				delay: tt.late, window: 166667 * time.Microsecond, boost: 0.2})
			t.Logf("simulated: %s", simString(got))
			for k, want := range map[string]float64{"a": float64(tt.ta), "b": float64(tt.tb)} {
				if d := got[k] - want; d > 3 || d < -3 {
					t.Errorf("%s got %.1f, want %.0f ± 3", k, got[k], want)
				}
			}
		})
	}
}
