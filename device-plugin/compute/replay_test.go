package compute

import (
	"bufio"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/volcano-vgpu/volcano-vgpu/api"
)

// Replays of a real GPU's control periods: the period traces the gpu check
// writes (cmd/vgpu-gpu-check, -trace: each period's busy time, SM clock,
// lag and each tenant's target and charged units), recorded on an NVIDIA
// H200 (driver 580.159.04, CUDA 13.0, PyTorch 2.11.0+cu130, 2026-11-29),
// fed to a fresh controller period by period, each tenant's launched
// counter the running sum of its units. The replay is open loop: the
// controller's decisions do not change what the recording launched, so it
// checks what the estimator makes of windows the card gave, not the shares.

// replayPeriod is one recorded control period.
type replayPeriod struct {
	t, busy, clock, lag float64
	period              float64 // s; 0: not recorded (the time since the last period stands for it)
	keys                []string
	units, target       map[string]float64
}

// loadReplay reads a trace (columns by the header's names).
func loadReplay(t *testing.T, path string) []replayPeriod {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	if !sc.Scan() {
		t.Fatalf("%s: no header", path)
	}
	col := map[string]int{}
	for i, name := range strings.Split(sc.Text(), "\t") {
		col[name] = i
	}
	for _, name := range []string{"t_s", "busy", "clock_mhz", "lag_ms", "tenant", "target", "units"} {
		if _, ok := col[name]; !ok {
			t.Fatalf("%s: no column %q", path, name)
		}
	}
	var out []replayPeriod
	for line := 2; sc.Scan(); line++ {
		c := strings.Split(sc.Text(), "\t")
		num := func(name string) float64 {
			v, err := strconv.ParseFloat(c[col[name]], 64)
			if err != nil {
				t.Fatalf("%s:%d: %s: %v", path, line, name, err)
			}
			return v
		}
		ts := num("t_s")
		if len(out) == 0 || out[len(out)-1].t != ts {
			out = append(out, replayPeriod{t: ts, busy: num("busy"), clock: num("clock_mhz"), lag: num("lag_ms"),
				units: map[string]float64{}, target: map[string]float64{}})
			if _, ok := col["period_ms"]; ok {
				out[len(out)-1].period = num("period_ms") / 1e3
			}
		}
		p := &out[len(out)-1]
		key := c[col["tenant"]]
		if _, seen := p.units[key]; !seen {
			p.keys = append(p.keys, key)
		}
		p.units[key] = num("units")
		p.target[key] = num("target")
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// replayStep is what the controller made of one period.
type replayStep struct {
	t      float64
	fitted bool
	cost   map[string]float64
	// charged: the tenants charged other than the recording's units (as
	// "key charged of recorded"): a replay whose controller clips them to
	// its own allowances is not the card's windows
	charged []string
}

// replay runs the recorded periods through a controller for a GPU whose
// per-process samples give no shares (the H200's).
func replay(periods []replayPeriod) []replayStep {
	g := NewGPU()
	g.recorded = true
	launched := map[string]float64{}
	var out []replayStep
	for i := 1; i < len(periods); i++ {
		p := periods[i]
		P := (p.t - periods[i-1].t) * 1e9
		if p.period > 0 {
			P = p.period * 1e9
		}
		in := Input{BusyNs: p.busy * P, PeriodNs: P, ClockMHz: p.clock, NowNs: uint64(p.t * 1e9), LagNs: p.lag * 1e6, Unshared: true}
		for _, key := range p.keys {
			launched[key] += p.units[key]
			n := uint64(launched[key])
			in.Tenants = append(in.Tenants, TenantInput{Tenant: Tenant{Key: key, Share: p.target[key], Policy: api.ComputeFixed},
				Report: Report{Launched: n, Latest: n}})
		}
		st := replayStep{t: p.t, fitted: g.Fitted(), cost: map[string]float64{}}
		for _, d := range g.Step(in) {
			st.cost[d.Key] = d.Cost
			if u := p.units[d.Key]; math.Abs(d.Units-u) > 1 {
				st.charged = append(st.charged, fmt.Sprintf("%s %.0f of %.0f", d.Key, d.Units, u))
			}
		}
		st.fitted = g.Fitted()
		out = append(out, st)
	}
	return out
}

func TestReplayH200(t *testing.T) {
	tests := []struct {
		name  string
		trace string
		// split: the tenants run different programs and must be told
		// apart by this time (s), the first one's cost at least dearer
		// times the second's; else they run one program and must never be
		split       bool
		by, dearer  float64
		first, then string
	}{
		// 25.3 + 66.0 on the card: its drained rows put the two 7x apart
		{name: "one program at 30 + 60 stays one", trace: "pair-pytorch-30-60"},
		{name: "one program at 50 + 50 stays one", trace: "pair-pytorch-50-50"},
		{name: "one program at 20 + 30 + 40 stays one", trace: "triple-pytorch-20-30-40"},
		{name: "PyTorch 30 beside the elementwise probe 60 is split", trace: "mixed-pytorch-30-probe-elem-60",
			split: true, by: 9, dearer: 1000, first: "0:pytorch@30", then: "1:probe-elem@60"},
		{name: "PyTorch 50 beside the elementwise probe 50 is split", trace: "mixed-pytorch-50-probe-elem-50",
			split: true, by: 11, dearer: 1000, first: "0:pytorch@50", then: "1:probe-elem@50"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			steps := replay(loadReplay(t, filepath.Join("testdata", "h200-2026-11-29", tt.trace+".tsv")))
			if len(steps) < 50 {
				t.Fatalf("%d periods replayed: the trace is cut short", len(steps))
			}
			for _, s := range steps {
				if len(s.charged) > 0 {
					t.Fatalf("at %.2f s the replay charged %v: not the recording's units", s.t, s.charged)
				}
			}
			var at float64
			for _, s := range steps {
				if s.fitted && at == 0 {
					at = s.t
					t.Logf("split at %.1f s: %v", s.t, s.cost)
				}
			}
			if !tt.split {
				if at != 0 {
					t.Fatalf("tenants of one program were split at %.1f s", at)
				}
				return
			}
			if at == 0 || at > tt.by {
				t.Fatalf("different programs split at %.1f s (0: never), want by %.0f s", at, tt.by)
			}
			last := steps[len(steps)-1].cost
			if r := last[tt.first] / last[tt.then]; r < tt.dearer {
				t.Fatalf("costs at the end %v: %s only %.0f times %s's, want %.0f", last, tt.first, r, tt.then, tt.dearer)
			}
		})
	}
}
