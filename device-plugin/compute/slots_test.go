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
		// 1/6 s (a device sample's window) is five of them: each sample holds
		// whole slot periods, whatever its phase
		{name: "an H100's 100 ms samples: three slot periods", P: 100 * time.Millisecond, want: time.Second / 30},
		{name: "an H200's 200 ms samples: six", P: 200 * time.Millisecond, want: time.Second / 30},
		{name: "two samples read at once: the same slot period", P: 300 * time.Millisecond, want: time.Second / 30},
		{name: "a sample period a slot period's multiple of 1/6 s", P: 500 * time.Millisecond, want: 500 * time.Millisecond / 12},
		{name: "no whole fraction near slotPeriod fits 1/6 s: the longest", P: 70 * time.Millisecond, want: 70 * time.Millisecond},
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
		confine bool
		fracs   map[string]float64
		want    map[string]api.Slot
	}{
		{name: "two tenants, in key order, as long as their targets",
			ds:      []Decision{limited("b", 0.6, 0), limited("a", 0.3, 0)},
			slotted: map[string]bool{"a": true, "b": true},
			want:    map[string]api.Slot{"a": {PeriodUs: 33333, StartUs: 0, LenUs: 10000}, "b": {PeriodUs: 33333, StartUs: 10000, LenUs: 20000}}},
		{name: "a turn's lent share lengthens its slot",
			ds:      []Decision{limited("a", 0.3, 0.05), limited("b", 0.6, -0.05)},
			slotted: map[string]bool{"a": true, "b": true},
			want:    map[string]api.Slot{"a": {PeriodUs: 33333, StartUs: 0, LenUs: 11667}, "b": {PeriodUs: 33333, StartUs: 11667, LenUs: 18333}}},
		{name: "targets past the whole GPU are scaled to the period",
			ds:      []Decision{limited("a", 0.8, 0), limited("b", 0.8, 0)},
			slotted: map[string]bool{"a": true, "b": true},
			want:    map[string]api.Slot{"a": {PeriodUs: 33333, StartUs: 0, LenUs: 16667}, "b": {PeriodUs: 33333, StartUs: 16667, LenUs: 16666}}},
		{name: "one tenant held to a rate: no slots",
			ds:      []Decision{limited("a", 0.3, 0), {Key: "b", Share: 1, Control: api.ControlDevice{Mode: api.ControlUnlimited}}},
			slotted: map[string]bool{"a": true, "b": true},
			want:    map[string]api.Slot{}},
		{name: "a tenant not slotted (idle) gets none, and is left out",
			ds:      []Decision{limited("a", 0.3, 0), limited("b", 0.3, 0), limited("c", 0.3, 0)},
			slotted: map[string]bool{"a": true, "c": true},
			want:    map[string]api.Slot{"a": {PeriodUs: 33333, StartUs: 0, LenUs: 10000}, "c": {PeriodUs: 33333, StartUs: 10000, LenUs: 10000}}},
		{name: "confining: the slots fill the period, by target",
			ds:      []Decision{limited("a", 0.3, 0), limited("b", 0.6, 0)},
			slotted: map[string]bool{"a": true, "b": true}, confine: true, fracs: map[string]float64{"a": 0.3, "b": 0.6},
			want: map[string]api.Slot{"a": {PeriodUs: 33333, StartUs: 0, LenUs: 11111, Confine: true},
				"b": {PeriodUs: 33333, StartUs: 11111, LenUs: 22222, Confine: true}}},
		{name: "confining: a rate above the target lengthens the slot",
			ds:      []Decision{limited("a", 0.5, 0), limited("b", 0.5, 0)},
			slotted: map[string]bool{"a": true, "b": true}, confine: true, fracs: map[string]float64{"a": 0.5, "b": 0.75},
			want: map[string]api.Slot{"a": {PeriodUs: 33333, StartUs: 0, LenUs: 13333, Confine: true},
				"b": {PeriodUs: 33333, StartUs: 13333, LenUs: 20000, Confine: true}}},
		{name: "confining: a rate below the target keeps its part",
			ds:      []Decision{limited("a", 0.5, 0), limited("b", 0.5, 0)},
			slotted: map[string]bool{"a": true, "b": true}, confine: true, fracs: map[string]float64{"a": 0.2, "b": 0.5},
			want: map[string]api.Slot{"a": {PeriodUs: 33333, StartUs: 0, LenUs: 16667, Confine: true},
				"b": {PeriodUs: 33333, StartUs: 16667, LenUs: 16666, Confine: true}}},
		{name: "confining, but a slotted tenant has no rate yet: plain slots",
			ds: []Decision{limited("a", 0.3, 0), limited("b", 0.3, 0),
				{Key: "c", Share: 0.3, Control: api.ControlDevice{Mode: api.ControlLimited}}},
			slotted: map[string]bool{"a": true, "b": true, "c": true}, confine: true, fracs: map[string]float64{"a": 0.3, "b": 0.3},
			want: map[string]api.Slot{"a": {PeriodUs: 33333, StartUs: 0, LenUs: 10000}, "b": {PeriodUs: 33333, StartUs: 10000, LenUs: 10000}}},
		{name: "no rate yet (boot): no slot",
			ds: []Decision{limited("a", 0.3, 0), limited("b", 0.3, 0),
				{Key: "c", Share: 0.3, Control: api.ControlDevice{Mode: api.ControlLimited}}},
			slotted: map[string]bool{"a": true, "b": true, "c": true},
			want:    map[string]api.Slot{"a": {PeriodUs: 33333, StartUs: 0, LenUs: 10000}, "b": {PeriodUs: 33333, StartUs: 10000, LenUs: 10000}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assignSlots(tt.ds, tt.slotted, P, tt.confine, tt.fracs)
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

// TestSimSamplePhase: a device sample averages the last 1/6 s, and the
// driver stamps it on its own clock, at any phase of the slots'. Slot
// periods of 50 ms (an H100's 100 ms samples) left a part of one in every
// sample: an unsaturated pair of 30 + 30 read 28.0 to 33.1 by phase, the
// same on the fake driver (33.1 at its phase 0; the demo's two 30% pods).
// On an H200's samples (200 ms apart, 1/6 s each) a pair's start whose
// launches ran between two samples read 8.9 ns per unit for a true 125,
// and at three phases of seven 30 + 60 got 26.3-27.2 + 54.9-55.5
// (startsLevel). Simulated, noise-free: a phase moves a share by at most
// rounding.
func TestSimSamplePhase(t *testing.T) {
	tests := []struct {
		name  string
		specs []simTenant
		opts  simOptions
		want  map[string]float64
		tol   float64
	}{
		{name: "30 + 30, the GPU not full, 100 ms samples", specs: []simTenant{simT("a", 30, simPlain), simT("b", 30, simPlain)},
			want: map[string]float64{"a": 30, "b": 30}, tol: 1},
		{name: "10 + 20 + 30, 100 ms samples, 50 ms late", specs: []simTenant{simT("a", 10, simPlain), simT("b", 20, simPlain), simT("c", 30, simPlain)},
			opts: simOptions{delay: 50 * time.Millisecond}, want: map[string]float64{"a": 10, "b": 20, "c": 30}, tol: 1},
		{name: "30 + 30 on an H200's samples", specs: []simTenant{simT("a", 30, simPlain), simT("b", 30, simPlain)},
			opts: simOptions{wholeDevice: true}, want: map[string]float64{"a": 30, "b": 30}, tol: 1},
		{name: "30 + 60 on an H200's samples", specs: []simTenant{simT("a", 30, simPlain), simT("b", 60, simPlain)},
			opts: simOptions{wholeDevice: true}, want: map[string]float64{"a": 30, "b": 60}, tol: 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for ph := time.Duration(0); ph < 100*time.Millisecond; ph += 15 * time.Millisecond {
				opts := tt.opts
				opts.window, opts.phase = sampleWindow, ph
				got, _ := simulate(t, tt.specs, opts)
				for k, want := range tt.want {
					if d := got[k] - want; d > tt.tol || d < -tt.tol {
						t.Errorf("samples at phase %v: %s got %.1f, want %.0f ± %.0f (%s)", ph, k, got[k], want, tt.tol, simString(got))
					}
				}
			}
		})
	}
}
