package runner

import (
	"bytes"
	"math"
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

func TestShareOf(t *testing.T) {
	const plugin = ownPrefix + "plugins/vgpu.(*plugin).predicate"
	const core = ownPrefix + "plugins/placement.(*Fitter).Fit"
	tests := []struct {
		name   string
		stacks [][]string
		values []int64
		want   float64
	}{
		{name: "ours anywhere on the stack", want: 0.4,
			stacks: [][]string{
				{"runtime.mallocgc", core, plugin, "volcano.sh/volcano/pkg/scheduler/framework.(*Session).PredicateFn"},
				{"volcano.sh/volcano/pkg/scheduler/plugins/nodeorder.(*NodeOrderPlugin).NodeOrderFn"},
				{"runtime.gcBgMarkWorker"},
			},
			values: []int64{40, 50, 10}},
		{name: "none of ours", want: 0,
			stacks: [][]string{{"volcano.sh/volcano/pkg/scheduler.(*Scheduler).runOnce"}}, values: []int64{7}},
		{name: "a look-alike module is not ours", want: 0,
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
			got, err := shareOf(parsed, ownPrefix)
			if err != nil || math.Abs(got-tt.want) > 1e-9 {
				t.Fatalf("shareOf = %v, %v; want %v", got, err, tt.want)
			}
		})
	}
	if _, err := shareOf(&pprofile.Profile{SampleType: []*pprofile.ValueType{{Type: "alloc_space", Unit: "bytes"}}}, ownPrefix); err == nil {
		t.Fatal("a heap profile was read as a CPU profile")
	}
}
