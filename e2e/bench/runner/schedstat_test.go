package runner

import (
	"bytes"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	pprofile "github.com/google/pprof/profile"
)

func TestSessionCount(t *testing.T) {
	tests := []struct {
		name    string
		text    string
		want    int
		wantErr string
	}{
		{name: "histogram count", want: 57, text: `# HELP volcano_e2e_scheduling_latency_milliseconds E2e scheduling latency in milliseconds (scheduling algorithm + binding)
# TYPE volcano_e2e_scheduling_latency_milliseconds histogram
volcano_e2e_scheduling_latency_milliseconds_bucket{le="5"} 3
volcano_e2e_scheduling_latency_milliseconds_bucket{le="+Inf"} 57
volcano_e2e_scheduling_latency_milliseconds_sum 81234.5
volcano_e2e_scheduling_latency_milliseconds_count 57
# TYPE volcano_schedule_attempts_total counter
volcano_schedule_attempts_total{result="scheduled"} 2563
`},
		{name: "metric missing", wantErr: "no histogram " + sessionsMetric, text: `# TYPE volcano_schedule_attempts_total counter
volcano_schedule_attempts_total{result="scheduled"} 2563
`},
		{name: "not an exposition", wantErr: "vc-scheduler metrics", text: "<html>nope</html>\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := sessionCount(strings.NewReader(tt.text))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want one naming %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("sessionCount = %d, %v; want %d", got, err, tt.want)
			}
		})
	}
}

// cpuProfile builds a CPU profile whose samples have the given stacks
// (innermost first) and values (nanoseconds).
func cpuProfile(stacks [][]string, values []int64) *pprofile.Profile {
	p := &pprofile.Profile{SampleType: []*pprofile.ValueType{{Type: "samples", Unit: "count"}, {Type: "cpu", Unit: "nanoseconds"}}}
	fns := map[string]*pprofile.Function{}
	for i, st := range stacks {
		s := &pprofile.Sample{Value: []int64{1, values[i]}}
		for _, name := range st {
			fn := fns[name]
			if fn == nil {
				fn = &pprofile.Function{ID: uint64(len(fns) + 1), Name: name}
				fns[name] = fn
				p.Function = append(p.Function, fn)
			}
			loc := &pprofile.Location{ID: uint64(len(p.Location) + 1), Line: []pprofile.Line{{Function: fn}}}
			p.Location = append(p.Location, loc)
			s.Location = append(s.Location, loc)
		}
		p.Sample = append(p.Sample, s)
	}
	return p
}

func TestSharesOf(t *testing.T) {
	const plugin = ownPrefix + "plugins/vgpu.(*plugin).predicate"
	const score = ownPrefix + "plugins/vgpu.(*plugin).batchNodeOrder"
	const core = ownPrefix + "plugins/placement.(*Fitter).Fit"
	const tryNode = predicateFrame + ".func1"
	const worker = "k8s.io/client-go/util/workqueue.ParallelizeUntil.func1"
	tests := []struct {
		name   string
		stacks [][]string
		values []int64
		want   float64
		parts  map[string]float64
	}{
		{name: "ours anywhere on the stack, in the phase it ran in", want: 0.5,
			stacks: [][]string{
				{"runtime.mallocgc", core, plugin, "volcano.sh/volcano/pkg/scheduler/framework.(*Session).PredicateFn", tryNode, worker},
				{"volcano.sh/volcano/pkg/scheduler/plugins/predicates.(*PredicatesPlugin).Predicate", tryNode, worker},
				{score, scoreFrame + ".func3", worker},
				{"volcano.sh/volcano/pkg/scheduler/plugins/nodeorder.(*NodeOrderPlugin).NodeOrderFn", scoreFrame + ".func2"},
				{"runtime.gcDrain", "runtime.gcBgMarkWorker"},
				{"volcano.sh/volcano/pkg/scheduler.(*Scheduler).runOnce"},
			},
			values: []int64{40, 10, 10, 20, 15, 5},
			parts:  map[string]float64{PartPredicate: 0.5, PartPredicateOurs: 0.4, PartScore: 0.3, PartScoreOurs: 0.1, PartGC: 0.15}},
		{name: "none of ours", want: 0, parts: map[string]float64{},
			stacks: [][]string{{"volcano.sh/volcano/pkg/scheduler.(*Scheduler).runOnce"}}, values: []int64{7}},
		{name: "a look-alike module is not ours", want: 0, parts: map[string]float64{},
			stacks: [][]string{{"github.com/volcano-vgpu/volcano-vgpu-fork/plugins.X"}}, values: []int64{7}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := cpuProfile(tt.stacks, tt.values)
			// through the encoding vc-scheduler serves
			var buf bytes.Buffer
			if err := p.Write(&buf); err != nil {
				t.Fatal(err)
			}
			parsed, err := pprofile.Parse(&buf)
			if err != nil {
				t.Fatal(err)
			}
			got, parts, err := sharesOf(parsed, ownPrefix)
			if err != nil || math.Abs(got-tt.want) > 1e-9 {
				t.Fatalf("sharesOf = %v, %v; want %v", got, err, tt.want)
			}
			if len(parts) != len(tt.parts) {
				t.Errorf("parts %v, want %v", parts, tt.parts)
			}
			for k, v := range tt.parts {
				if math.Abs(parts[k]-v) > 1e-9 {
					t.Errorf("part %s = %v, want %v (all: %v)", k, parts[k], v, parts)
				}
			}
		})
	}
	if _, _, err := sharesOf(&pprofile.Profile{SampleType: []*pprofile.ValueType{{Type: "alloc_space", Unit: "bytes"}}}, ownPrefix); err == nil {
		t.Fatal("a heap profile was read as a CPU profile")
	}
}

func TestProfileSharesFromFile(t *testing.T) {
	p := cpuProfile([][]string{{predicateFrame}, {"runtime.gcBgMarkWorker"}}, []int64{3e9, 1e9})
	path := filepath.Join(t.TempDir(), "vgpu-1.pprof")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Write(f); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	own, parts, err := ProfileShares(path)
	if err != nil || own != 0 || parts[PartSeconds] != 4 || parts[PartPredicate] != 0.75 || parts[PartGC] != 0.25 {
		t.Fatalf("ProfileShares = %v, %v, %v; want 0, 4 s sampled, predicate 0.75, gc 0.25", own, parts, err)
	}
	if _, _, err := ProfileShares(filepath.Join(t.TempDir(), "missing.pprof")); err == nil {
		t.Fatal("a missing profile was read")
	}
}
