package main

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/compute"
)

func period(lag, p time.Duration, measured map[string]float64) compute.Observation {
	o := compute.Observation{Lag: lag, Period: p}
	for k, m := range measured {
		o.Decisions = append(o.Decisions, compute.Decision{Key: k, Measured: m})
	}
	return o
}

// The controller's attribution counts the periods that ended in the second
// half only, each by its length.
func TestAttribution(t *testing.T) {
	t0 := time.Unix(1000, 0)
	ms := time.Millisecond
	tests := []struct {
		name string
		arm  bool
		adds []struct {
			at time.Duration
			o  compute.Observation
		}
		want []float64 // a, b; nil: none counted
	}{
		{name: "not armed: the start line never began", adds: []struct {
			at time.Duration
			o  compute.Observation
		}{{at: 6 * time.Second, o: period(0, 200*ms, map[string]float64{"a": 0.3, "b": 0.6})}}},
		{name: "a period that ended before the midpoint is left out, even read after it", arm: true, adds: []struct {
			at time.Duration
			o  compute.Observation
		}{
			{at: 5*time.Second + 10*ms, o: period(20*ms, 200*ms, map[string]float64{"a": 0.9, "b": 0.1})},
			{at: 5*time.Second + 220*ms, o: period(20*ms, 200*ms, map[string]float64{"a": 0.3, "b": 0.6})},
		}, want: []float64{30, 60}},
		{name: "weighed by the periods' lengths", arm: true, adds: []struct {
			at time.Duration
			o  compute.Observation
		}{
			{at: 6 * time.Second, o: period(0, 300*ms, map[string]float64{"a": 0.2, "b": 0.7})},
			{at: 7 * time.Second, o: period(0, 100*ms, map[string]float64{"a": 0.6, "b": 0.3})},
			{at: 8 * time.Second, o: period(0, 0, map[string]float64{"a": 1})}, // no length: nothing
		}, want: []float64{30, 60}},
		{name: "a period that ended after the tenants' loops is left out", arm: true, adds: []struct {
			at time.Duration
			o  compute.Observation
		}{
			{at: 9*time.Second + 900*ms, o: period(0, 200*ms, map[string]float64{"a": 0.3, "b": 0.6})},
			{at: 10*time.Second + 100*ms, o: period(0, 200*ms, map[string]float64{"a": 0.1, "b": 0})},
		}, want: []float64{30, 60}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var a attribution
			if tt.arm {
				a.arm(t0.Add(5*time.Second), t0.Add(10*time.Second))
			}
			for _, ad := range tt.adds {
				a.add(ad.o, t0.Add(ad.at))
			}
			got, ok := a.shares([]string{"a", "b"})
			if ok != (tt.want != nil) {
				t.Fatalf("counted %v (%v), want %v", ok, got, tt.want)
			}
			for i := range tt.want {
				if math.Abs(got[i]-tt.want[i]) > 1e-9 {
					t.Errorf("shares %v, want %v", got, tt.want)
				}
			}
			if n := a.note([]string{"a", "b"}); tt.want != nil && n != "GPU time as the controller attributed it 30.0 + 60.0" {
				t.Errorf("note %q", n)
			}
			if n := a.note(nil); n != "" {
				t.Errorf("note of no tenant held %q", n)
			}
		})
	}
}

func TestSplitByRate(t *testing.T) {
	torch := func(c int) tenantSpec { return tenantSpec{Work: "pytorch", Cores: c} }
	tests := []struct {
		name string
		ts   []tenantSpec
		got  []float64
		busy float64
		want []float64 // nil: not one program's row
	}{
		// the clock lifts both rates alike: 32 + 64 of the solo rate at 90% busy
		{name: "one program over in rate by the clock", ts: []tenantSpec{torch(30), torch(60)}, got: []float64{32, 64}, busy: 90, want: []float64{30, 60}},
		{name: "a switch's time lands on both", ts: []tenantSpec{torch(50), torch(50)}, got: []float64{45.7, 45.7}, busy: 92, want: []float64{46, 46}},
		{name: "a mix of programs", ts: []tenantSpec{torch(30), {Work: "probe-elem", Cores: 60}}, got: []float64{36, 63}, busy: 95},
		{name: "one tenant: the device's figure is its own", ts: []tenantSpec{torch(50)}, got: []float64{60.7}, busy: 50},
		{name: "no rate", ts: []tenantSpec{torch(30), torch(60)}, got: []float64{0, 0}, busy: 90},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := splitByRate(tt.ts, tt.got, tt.busy)
			if ok != (tt.want != nil) {
				t.Fatalf("split %v (%v), want %v", ok, got, tt.want)
			}
			for i := range tt.want {
				if math.Abs(got[i]-tt.want[i]) > 1e-9 {
					t.Errorf("split %v, want %v", got, tt.want)
				}
			}
		})
	}
}

// The footer counts one program's tenants whose GPU time held their band:
// a balance tenant's at least its target less 3; unlimited tenants and
// rows without a per-tenant figure count nothing.
func TestFooterGPUTimeHeld(t *testing.T) {
	torch := func(c int) tenantSpec { return tenantSpec{Work: "pytorch", Cores: c} }
	outs := []outcome{
		{row: row{Group: "pair", Kind: kindShare, Tenants: []tenantSpec{torch(30), torch(60)}},
			result: result{Status: statusMiss, GPUTime: []float64{30.1, 59.6}}}, // 32 + 64 in rate: held in GPU time
		{row: row{Group: "pair", Kind: kindShare, Tenants: []tenantSpec{torch(50), torch(50)}},
			result: result{Status: statusMiss, GPUTime: []float64{46.0, 46.0}}},
		{row: row{Group: "balance", Kind: kindShare, Tenants: []tenantSpec{torch(50), {Work: "pytorch", Cores: 30, Balance: true}}},
			result: result{Status: statusOK, GPUTime: []float64{48.5, 49.0}}},
		{row: row{Group: "pair", Kind: kindShare, Tenants: []tenantSpec{{Work: "pytorch", Unlimited: true}, {Work: "pytorch", Unlimited: true}}},
			result: result{Status: statusOK, GPUTime: []float64{46, 46}}},
		{row: row{Group: "mixed", Kind: kindShare, Tenants: []tenantSpec{torch(30), {Work: "probe-elem", Cores: 60}}},
			result: result{Status: statusMiss, GPUTime: []float64{95}}},
		{row: row{Group: "pair", Kind: kindShare, Tenants: []tenantSpec{torch(30), torch(60)}},
			result: result{Status: statusTimeout, GPUTime: []float64{10, 10}}},
	}
	got := footer(outs, "GPU", time.Second)
	want := "# one program's share rows in GPU time (the device's busy time split by their rates): 4 of 6 tenants within their band\n"
	if !strings.Contains(got, want) {
		t.Errorf("footer lacks %q:\n%s", want, got)
	}
	if got := footer(outs[4:5], "GPU", time.Second); strings.Contains(got, "one program's share rows") {
		t.Errorf("a mix of programs counted:\n%s", got)
	}
}

// A row's GPU time reads the device's busy figure over every period of the
// second half as the controller read it, the check's own half-second
// readings only where no period was counted.
func TestRowGPUTime(t *testing.T) {
	torch := func(c int) tenantSpec { return tenantSpec{Work: "pytorch", Cores: c} }
	pair := []tenantSpec{torch(30), torch(60)}
	t0 := time.Unix(1000, 0)
	counted := func(busy float64) *attribution {
		a := &attribution{}
		a.arm(t0, t0.Add(10*time.Second))
		o := period(0, 200*time.Millisecond, map[string]float64{"a": 0.3, "b": 0.6})
		o.Busy = busy
		a.add(o, t0.Add(time.Second))
		return a
	}
	tests := []struct {
		name  string
		ts    []tenantSpec
		attr  *attribution
		dev   *devSampler
		want  []float64
		split bool
	}{
		{name: "the controller's periods, split by rate", ts: pair, attr: counted(0.9), dev: &devSampler{busy: []float64{84}},
			want: []float64{30, 60}, split: true},
		{name: "no period counted: the check's readings", ts: pair, attr: &attribution{}, dev: &devSampler{busy: []float64{84}},
			want: []float64{28, 56}, split: true},
		{name: "a mix of programs: the device's figure alone", ts: []tenantSpec{torch(30), {Work: "probe-elem", Cores: 60}},
			attr: counted(0.95), dev: &devSampler{}, want: []float64{95}},
		{name: "no reading at all", ts: pair, attr: &attribution{}, dev: &devSampler{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, split := rowGPUTime(tt.ts, []float64{32, 64}, tt.attr, tt.dev)
			if split != tt.split || len(got) != len(tt.want) {
				t.Fatalf("GPU time %v (split %v), want %v (split %v)", got, split, tt.want, tt.split)
			}
			for i := range tt.want {
				if math.Abs(got[i]-tt.want[i]) > 1e-9 {
					t.Errorf("GPU time %v, want %v", got, tt.want)
				}
			}
		})
	}
}
