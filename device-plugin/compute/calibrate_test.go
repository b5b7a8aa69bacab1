package compute

import (
	"math"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/volcano-vgpu/volcano-vgpu/api"
)

func fixedTenant(key string, share float64, launched uint64) TenantInput {
	return TenantInput{Tenant: Tenant{Key: key, Share: share, Policy: api.ComputeFixed}, Report: Report{Launched: launched}}
}

// TestStepAttributesByMeasuredCost: two tenants launch the same units per
// period, but a's processes measure 4x b's GPU time; the busy time is split
// by what was measured, not by the units.
func TestStepAttributesByMeasuredCost(t *testing.T) {
	tests := []struct {
		name    string
		measure bool
		want    map[string]float64 // Measured after 20 periods
	}{
		// 80 ms busy of 100; a: 4 × 1000 units' cost, b: 1 × 1000 -> 0.64 + 0.16
		{name: "per-process samples split the busy time 4:1", measure: true, want: map[string]float64{"a": 0.64, "b": 0.16}},
		// no samples: one pooled cost, the units split it evenly
		{name: "without samples the units split it evenly", measure: false, want: map[string]float64{"a": 0.4, "b": 0.4}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewGPU()
			var got map[string]float64
			for i := range uint64(20) {
				in := Input{BusyNs: 80e6, PeriodNs: 100e6, NowNs: 1e9 + i*100e6,
					Tenants: []TenantInput{fixedTenant("a", 0.5, i*1000), fixedTenant("b", 0.4, i*1000)}}
				if tt.measure && i%10 == 5 { // one sample a second: a 64%, b 16% of a 1 s window
					in.Measurement = &Measurement{SpanNs: 1e9, BusyNs: 800e6, Tenants: map[string]Measured{
						"a": {BusyNs: 640e6, Units: 10000}, "b": {BusyNs: 160e6, Units: 10000}}}
				}
				got = map[string]float64{}
				for _, d := range g.Step(in) {
					got[d.Key] = d.Measured
				}
			}
			if diff := cmp.Diff(tt.want, got, cmpopts.EquateApprox(0, 1e-9)); diff != "" {
				t.Errorf("attributed busy fractions (-want +got):\n%s", diff)
			}
		})
	}
}

// TestForeignLoadNotFromUnsharedSamples: a departed process's last samples
// read as 64% of foreign load in a pair's first rounds; then the GPU's
// samples turn out to give no shares (an H200's), and no round measures
// anything again. The foreign load goes with them: the targets are the
// pair's own, not scaled to 11.5 + 23.
func TestForeignLoadNotFromUnsharedSamples(t *testing.T) {
	g := NewGPU()
	step := func(i uint64, unshared bool, m *Measurement) []Decision {
		return g.Step(Input{BusyNs: 64e6, PeriodNs: 100e6, NowNs: 1e9 + i*100e6, Unshared: unshared,
			Tenants: []TenantInput{fixedTenant("a", 0.3, 0), fixedTenant("b", 0.6, 0)}, Measurement: m})
	}
	for i := range uint64(2) {
		step(i, false, &Measurement{SpanNs: 200e6, BusyNs: 128e6, ForeignNs: 128e6, Unowned: 1, Tenants: map[string]Measured{}})
	}
	if f := g.Foreign(); math.Abs(f-0.64) > 1e-6 {
		t.Fatalf("foreign load %v after the departed process's rounds, want 0.64", f)
	}
	var ds []Decision
	for i := uint64(2); i < 20; i++ {
		ds = step(i, true, nil)
	}
	if f := g.Foreign(); f != 0 {
		t.Errorf("foreign load %v on a GPU whose samples give no shares, want 0", f)
	}
	for _, d := range ds {
		if want := map[string]float64{"a": 0.3, "b": 0.6}[d.Key]; math.Abs(d.Share-want) > 1e-9 {
			t.Errorf("%s: target %.4f, want %.4f", d.Key, d.Share, want)
		}
	}
}

// TestForeignLoadShrinksTheHeadroom: a process no tenant owns takes 20% of
// the GPU: reported, not charged, and the shares scaled to what it leaves.
func TestForeignLoadShrinksTheHeadroom(t *testing.T) {
	g := NewGPU()
	var ds []Decision
	for i := range uint64(30) { // a second's samples every period
		in := Input{BusyNs: 90e6, PeriodNs: 100e6, NowNs: 1e9 + i*100e6,
			Tenants: []TenantInput{fixedTenant("a", 0.3, i*1000), fixedTenant("b", 0.6, i*2000)},
			Measurement: &Measurement{SpanNs: 1e9, BusyNs: 900e6, ForeignNs: 200e6, Tenants: map[string]Measured{
				"a": {BusyNs: 233e6, Units: 10000}, "b": {BusyNs: 467e6, Units: 20000}}}}
		ds = g.Step(in)
	}
	if f := g.Foreign(); math.Abs(f-0.2) > 1e-6 {
		t.Errorf("foreign load %v, want 0.2 (200 of 1000 ms)", f)
	}
	// targets: (0.985 - 0.2) × 30/90 and × 60/90; busy left to the tenants:
	// 90 - 20 ms, split 1:2 by equal measured costs
	want := map[string][2]float64{"a": {0.785 / 3, 0.7 / 3}, "b": {0.785 * 2 / 3, 1.4 / 3}}
	for _, d := range ds {
		w := want[d.Key]
		if math.Abs(d.Share-w[0]) > 1e-9 || math.Abs(d.Measured-w[1]) > 1e-3 {
			t.Errorf("%s: target %.4f attributed %.4f, want %.4f and %.4f", d.Key, d.Share, d.Measured, w[0], w[1])
		}
	}
}

// TestStepChargesARewoundCounter: a tenant whose counter goes backwards is
// charged what it was allowed that period, not a fresh start at no cost, and
// its neighbour is not charged its busy time.
func TestStepChargesARewoundCounter(t *testing.T) {
	tests := []struct {
		name     string
		launched func(i uint64) uint64 // a's counter in period i
		rewinds  uint64
	}{
		{name: "an honest counter", launched: func(i uint64) uint64 { return i * 1000 }, rewinds: 0},
		{name: "a counter rewound to zero in period 15", launched: func(i uint64) uint64 {
			if i >= 15 {
				return (i - 15) * 1000
			}
			return i * 1000
		}, rewinds: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewGPU()
			var last []Decision
			for i := range uint64(16) {
				last = g.Step(Input{BusyNs: 60e6, PeriodNs: 100e6, NowNs: 1e9 + i*100e6,
					Tenants: []TenantInput{fixedTenant("a", 0.3, tt.launched(i)), fixedTenant("b", 0.3, i*1000)}})
			}
			a, b := last[0], last[1]
			if a.Rewinds != tt.rewinds {
				t.Errorf("a's rewinds %d, want %d", a.Rewinds, tt.rewinds)
			}
			// a was allowed about its rate for the period; charged that,
			// b is charged no more than half the busy time
			if a.Units <= 0 || b.Measured > 0.3+1e-9 {
				t.Errorf("a charged %v units (want what it was allowed, > 0), b attributed %.3f (want <= 0.30)", a.Units, b.Measured)
			}
		})
	}
}

// TestMeasurementUnmappedFromTheStart: no owner maps any sample on a GPU
// whose samples never showed shares (a device plugin without the host's
// pids): every round is partial, and it still says so (the runner's
// warning), with nothing to learn from.
func TestMeasurementUnmappedFromTheStart(t *testing.T) {
	owner := func(uint32) (string, bool) { return "", false }
	units := func(key string, a, b uint64) (float64, bool) { return float64(b-a) / 1e6, key == "a" }
	g := &gpuSamples{}
	for i := range uint64(30) {
		g.addWindow(Window{StartNs: i * 100e6, EndNs: (i + 1) * 100e6, BusyNs: 60e6})
	}
	var m *Measurement
	for i, end := range []uint64{2e9, 3e9} {
		g.pending = []ProcessSample{{PID: 4000123, StartNs: end - 1e9, EndNs: end, SM: 0.6}}
		m = g.measurement(end+0.1e9, owner, units, []string{"a"})
		if i == 0 && m != nil {
			t.Fatalf("first sighting: %+v, want no measurement (a partial round)", m)
		}
	}
	if m == nil || !m.Unmapped || len(m.Tenants) != 0 || m.ForeignNs != 0 || m.BusyNs != 0 {
		t.Fatalf("second round: %+v, want an unmapped measurement with no tenants, foreign or residual", m)
	}
	if g.partial != 2 {
		t.Errorf("partial rounds %d, want 2 (both count toward an unshared GPU)", g.partial)
	}
}

// TestSayUnmapped: the warning that no owner maps the samples comes after
// unmappedSay rounds in a row, not from one round of churn (a departed
// process's last sample while the new one's first is yet to come), and once
// until samples map again.
func TestSayUnmapped(t *testing.T) {
	unmapped := &Measurement{Unmapped: true}
	mapped := &Measurement{Tenants: map[string]Measured{"a": {BusyNs: 1}}}
	g := &gpuSamples{}
	for _, step := range []struct {
		name string
		m    *Measurement
		say  bool
	}{
		{"one round of churn", unmapped, false},
		{"a round with no measurement", nil, false},
		{"samples map again", mapped, false},
		{"unmapped 1", unmapped, false},
		{"unmapped 2", unmapped, false},
		{"unmapped 3: say it", unmapped, true},
		{"unmapped 4: said already", unmapped, false},
		{"mapped", mapped, false},
		{"unmapped 1 after mapping", unmapped, false},
		{"unmapped 2 after mapping", unmapped, false},
		{"unmapped 3 after mapping: say it again", unmapped, true},
	} {
		if got := g.sayUnmapped(step.m); got != step.say {
			t.Errorf("%s: say %v, want %v", step.name, got, step.say)
		}
	}
}

func TestMeasurementFromSamples(t *testing.T) {
	owners := map[uint32]string{100: "a", 101: "a", 200: "b"}
	owner := func(pid uint32) (string, bool) { k, ok := owners[pid]; return k, ok }
	units := func(key string, a, b uint64) (float64, bool) {
		if key == "b" {
			return 0, false // b's counter went backwards in the window
		}
		return float64(b-a) / 1e6, true // a: one unit per ms
	}
	g := &gpuSamples{unowned: map[uint32]bool{999: true}} // 999 was in the previous batch too
	for i := range uint64(20) {                           // device windows 100 ms each, 50% busy
		g.addWindow(Window{StartNs: i * 100e6, EndNs: (i + 1) * 100e6, BusyNs: 50e6})
	}
	g.pending = []ProcessSample{
		{PID: 100, StartNs: 1e9, EndNs: 2e9, SM: 0.2}, {PID: 101, StartNs: 1e9, EndNs: 2e9, SM: 0.1},
		{PID: 200, StartNs: 1e9, EndNs: 2e9, SM: 0.05}, {PID: 999, StartNs: 1e9, EndNs: 2e9, SM: 0.1},
		{PID: 100, StartNs: 2e9, EndNs: 3e9, SM: 0.3}, // not covered by the device windows yet
	}
	got := g.measurement(2.1e9, owner, units, []string{"a", "b"})
	want := &Measurement{SpanNs: 1e9, BusyNs: 500e6, ForeignNs: 100e6, Unowned: 1, Tenants: map[string]Measured{
		"a": {BusyNs: 300e6, Units: 1000}, "b": {BusyNs: 50e6, NoUnits: true}}}
	if diff := cmp.Diff(want, got, cmpopts.EquateApprox(0, 1e-6)); diff != "" {
		t.Errorf("measurement (-want +got):\n%s", diff)
	}
	if len(g.pending) != 1 {
		t.Errorf("%d samples still pending, want the one the device windows do not cover", len(g.pending))
	}
	// the same round without b's sample (its process had none yet): the
	// device's busy time would leave b's time as foreign, so it is not given
	g.pending = []ProcessSample{{PID: 100, StartNs: 1e9, EndNs: 2e9, SM: 0.2}, {PID: 999, StartNs: 1e9, EndNs: 2e9, SM: 0.1}}
	if m := g.measurement(2.1e9, owner, units, []string{"a", "b"}); m.BusyNs != 0 || m.ForeignNs != 100e6 {
		t.Errorf("b launched and has no sample: busy %v, foreign %v; want 0 (no residual) and 1e8", m.BusyNs, m.ForeignNs)
	}
	g.unowned = map[uint32]bool{999: true}
	// an unowned pid seen for the first time (a container's process that just
	// ended shows up once) is not foreign load yet
	g.pending = []ProcessSample{{PID: 777, StartNs: 1e9, EndNs: 2e9, SM: 0.9}}
	if m := g.measurement(2.1e9, owner, units, []string{"a", "b"}); m.ForeignNs != 0 || m.UnknownNs != 900e6 {
		t.Errorf("first sighting of pid 777: foreign %v, unknown %v; want 0 and 9e8", m.ForeignNs, m.UnknownNs)
	}
	// seen again, while tenant a launches and no sample maps to any tenant:
	// the owners cannot see the tenants' processes, so it is not foreign
	g.pending = []ProcessSample{{PID: 777, StartNs: 2e9, EndNs: 3e9, SM: 0.9}}
	for i := uint64(20); i < 30; i++ {
		g.addWindow(Window{StartNs: i * 100e6, EndNs: (i + 1) * 100e6, BusyNs: 90e6})
	}
	if m := g.measurement(3.1e9, owner, units, []string{"a", "b"}); m.ForeignNs != 0 || m.UnknownNs != 900e6 || !m.Unmapped {
		t.Errorf("no sample mapped while a launches: foreign %v, unknown %v, unmapped %v; want 0, 9e8, true", m.ForeignNs, m.UnknownNs, m.Unmapped)
	}
	// with no tenant launching, an unowned process is foreign load
	g.pending = []ProcessSample{{PID: 777, StartNs: 3e9, EndNs: 4e9, SM: 0.9}}
	for i := uint64(30); i < 40; i++ {
		g.addWindow(Window{StartNs: i * 100e6, EndNs: (i + 1) * 100e6, BusyNs: 90e6})
	}
	idle := func(string, uint64, uint64) (float64, bool) { return 0, true }
	if m := g.measurement(4.1e9, owner, idle, []string{"a", "b"}); m.ForeignNs != 900e6 || m.Unmapped {
		t.Errorf("idle tenants beside pid 777: foreign %v, unmapped %v; want 9e8, false", m.ForeignNs, m.Unmapped)
	}
}

func TestHistoryReport(t *testing.T) {
	type step struct {
		read      bool   // a reading of the report file at time t, else a report at edge x
		t, v, x   uint64 // reading: time and counter; report: now (t) and edge (x)
		wantCount uint64 // for a report
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{name: "an edge that moved back a little is not a step back", steps: []step{ // interpolation jitter: 150, then 140
			{read: true, t: 100, v: 1000}, {read: true, t: 200, v: 2000},
			{t: 210, x: 150, wantCount: 1500}, {t: 220, x: 140, wantCount: 1500}, {t: 230, x: 200, wantCount: 2000}}},
		{name: "a counter that went backwards is passed on", steps: []step{ // rewound to 10 at 300
			{read: true, t: 100, v: 1000}, {read: true, t: 200, v: 2000}, {t: 210, x: 200, wantCount: 2000},
			{read: true, t: 300, v: 10}, {t: 300, x: 300, wantCount: 10}, {t: 310, x: 300, wantCount: 10}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := &history{}
			for i, s := range tt.steps {
				if s.read {
					h.add(s.t, s.v, 0)
					continue
				}
				if got := h.report(s.x, s.t); got != s.wantCount {
					t.Errorf("step %d: reported %d at edge %d, want %d", i, got, s.x, s.wantCount)
				}
			}
		})
	}
}

// growingDevice answers GetProcessUtilization as go-nvml does when samples
// arrive between its count query and its read: it slices past its buffer.
type growingDevice struct{ nvml.Device }

func (growingDevice) GetProcessUtilization(uint64) ([]nvml.ProcessUtilizationSample, nvml.Return) {
	buf := make([]nvml.ProcessUtilizationSample, 3)
	n := 6
	return buf[:n], nvml.ERROR_INSUFFICIENT_SIZE
}

func TestProcessesSurviveSamplesArrivingBetweenCalls(t *testing.T) {
	s := &NVMLSource{handles: map[string]nvml.Device{"GPU-1": growingDevice{}}, last: map[string]uint64{},
		procs: map[string]*procCursor{}}
	got, err := s.Processes("GPU-1", 1e9, time.Now())
	if err != nil || got != nil {
		t.Errorf("Processes = %v, %v; want nothing and no error (ask again next poll)", got, err)
	}
}

// TestMeasurementOverRead: a round whose samples sum above the device's busy
// time is not shares of the GPU (an H200 gives every active process about
// the device's figure) and teaches nothing; on such a GPU a round that
// misses a launching tenant teaches nothing either.
func TestMeasurementOverRead(t *testing.T) {
	owners := map[uint32]string{100: "a", 200: "b"}
	owner := func(pid uint32) (string, bool) { k, ok := owners[pid]; return k, ok }
	both := func(string, uint64, uint64) (float64, bool) { return 100, true }
	onlyA := func(key string, _, _ uint64) (float64, bool) {
		if key == "a" {
			return 100, true
		}
		return 0, true
	}
	round := func(sm ...float64) []ProcessSample {
		var out []ProcessSample
		for i, v := range sm {
			out = append(out, ProcessSample{PID: []uint32{100, 200}[i], StartNs: 1e9, EndNs: 2e9, SM: v})
		}
		return out
	}
	tests := []struct {
		name      string
		overReads int  // before the round
		shares    bool // a complete round showed shares before it
		samples   []ProcessSample
		units     func(string, uint64, uint64) (float64, bool)
		kept      bool
		overAfter int
	}{
		{name: "shares of a 90% busy GPU", samples: round(0.3, 0.6), units: both, kept: true},
		{name: "shares under the device's figure", samples: round(0.6, 0.15), units: both, kept: true},
		{name: "each reads the whole device", samples: round(0.9, 0.9), units: both, overAfter: 1},
		{name: "just above the tolerance", samples: round(0.5, 0.51), units: both, overAfter: 1},
		{name: "a round missing a launching tenant, on a GPU that shares", shares: true, samples: round(0.9), units: both, kept: true},
		{name: "a round missing a launching tenant, before any round said", samples: round(0.9), units: both},
		{name: "a round missing a launching tenant, after over-reads", overReads: 1, samples: round(0.9), units: both, overAfter: 1},
		{name: "a tenant alone, after over-reads", overReads: 1, samples: round(0.9), units: onlyA, kept: true, overAfter: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := &gpuSamples{overReads: tt.overReads, sharesSeen: tt.shares}
			for i := range uint64(30) { // device windows 100 ms each, 90% busy
				g.addWindow(Window{StartNs: i * 100e6, EndNs: (i + 1) * 100e6, BusyNs: 90e6})
			}
			g.pending = tt.samples
			m := g.measurement(2.1e9, owner, tt.units, []string{"a", "b"})
			if kept := m != nil && !m.OverRead; kept != tt.kept {
				t.Errorf("measurement %+v, want kept %v", m, tt.kept)
			}
			if over := m != nil && m.OverRead; over != (tt.overAfter > tt.overReads) {
				t.Errorf("measurement %+v, want OverRead %v", m, tt.overAfter > tt.overReads)
			}
			if g.overReads != tt.overAfter {
				t.Errorf("over-read rounds %d, want %d", g.overReads, tt.overAfter)
			}
		})
	}
}
