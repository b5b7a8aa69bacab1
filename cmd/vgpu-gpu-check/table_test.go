package main

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden")

// A table with a row of every kind and verdict, as run.sh prints it.
func TestTableGolden(t *testing.T) {
	h := header{GPU: "NVIDIA H100 80GB HBM3", UUID: "GPU-8b1c0d2e-0000-4000-8000-000000000001", MemMiB: 81559,
		Driver: "580.159.04", CUDA: "13.0",
		Versions: []string{"pytorch 2.11.0+cu130 (CUDA 13.0)", "cupy 13.6.0 (CUDA 13000)", "probe", "nvcc 13.0"},
		Date:     "2026-11-23T10:00:00Z", Deadline: 6 * time.Minute, Timeout: time.Minute, Secs: 10, CapMiB: 8192,
		Planned: 281 * time.Second}
	sec := func(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }
	outs := []outcome{
		{row: row{Group: "context", Name: "context pytorch", Kind: kindContext}, result: result{Target: "-", Achieved: "514 MiB", Status: statusOK, ContextMiB: 514}, Took: sec(6.2)},
		{row: row{Group: "context", Name: "context probe", Kind: kindContext}, result: result{Target: "-", Achieved: "482 MiB", Status: statusOK, ContextMiB: 482}, Took: sec(1.1)},
		{row: row{Group: "memory", Name: "pytorch/expandable", Kind: kindMemory}, result: result{Target: "8192 MiB", Achieved: "7168 MiB", Status: statusOK}, Took: sec(7.9)},
		{row: row{Group: "memory", Name: "probe/vmm", Kind: kindMemory}, result: result{Target: "8192 MiB", Achieved: "9216 MiB", Status: statusOver, Note: "held 1024 MiB past the cap"}, Took: sec(2.4)},
		{row: row{Group: "memory", Name: "cupy/default", Kind: kindMemory}, result: result{Target: "-", Achieved: "-", Status: statusSkipped, Note: "cupy: python3 cupy_check.py version: exit status 1: ModuleNotFoundError: No module named 'cupy'"}},
		{row: row{Group: "single", Name: "solo pytorch", Kind: kindSolo}, result: result{Target: "100", Achieved: "78.1/s", Status: statusOK}, Took: sec(14.8)},
		{row: row{Group: "single", Name: "pytorch 10", Kind: kindShare}, result: result{Target: "10", Achieved: "11.2", Status: statusOK, Note: "+1.2; nvml per-pid sm% 12 (5 samples)", AbsErr: []float64{1.2}}, Took: sec(14.9)},
		{row: row{Group: "single", Name: "pytorch 30", Kind: kindShare}, result: result{Target: "30", Achieved: "26.5", Status: statusMiss, Note: "-3.5", AbsErr: []float64{3.5}}, Took: sec(15.0)},
		{row: row{Group: "pair", Name: "pytorch 30+60", Kind: kindShare}, result: result{Target: "30+60", Achieved: "-", Status: statusTimeout, Note: "cut after 1m0s (-scenario-timeout 1m0s, 3m10s left of -deadline)"}, Took: sec(60.0)},
		{row: row{Group: "mixed", Name: "pytorch 30 + probe-elem 60", Kind: kindShare}, result: result{Target: "30+60", Achieved: "-", Status: statusError, Note: "tenant 2 (probe-elem 60): exit status 1: probe: kernel failed"}, Took: sec(3.3)},
		{row: row{Group: "balance", Name: "pytorch 50 + balance 30", Kind: kindShare}, result: result{Target: "-", Achieved: "-", Status: statusSkipped, Note: "total deadline near: 12s left, row planned at 16s (raise -deadline)"}},
	}
	var b strings.Builder
	b.WriteString(h.render())
	for _, o := range outs {
		b.WriteString(o.render())
	}
	b.WriteString(footer(outs, h.GPU, 348*time.Second))
	golden := filepath.Join("testdata", "table.golden")
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(golden, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (go test ./cmd/vgpu-gpu-check -run TestTableGolden -update writes it)", err)
	}
	if d := cmp.Diff(string(want), b.String()); d != "" {
		t.Errorf("table (-golden +got):\n%s", d)
	}
}

func TestFooter(t *testing.T) {
	for _, tc := range []struct {
		name string
		outs []outcome
		want []string
		not  []string
	}{
		{name: "contextMiB is the largest context measured, errors left out",
			outs: []outcome{
				{row: row{Kind: kindContext}, result: result{Status: statusOK, ContextMiB: 514}},
				{row: row{Kind: kindContext}, result: result{Status: statusOK, ContextMiB: 600}},
				{row: row{Kind: kindContext}, result: result{Status: statusError, ContextMiB: 9000}},
			},
			want: []string{`limiter.contextMiB: {"GPU": 600}`, "3 rows: 2 ok, 1 ERROR"}},
		{name: "the single tenant's mean error counts the misses too, not the pairs", // (1+3)/2 = 2.00
			outs: []outcome{
				{row: row{Group: "single", Kind: kindShare}, result: result{Status: statusOK, AbsErr: []float64{1}}},
				{row: row{Group: "single", Kind: kindShare}, result: result{Status: statusMiss, AbsErr: []float64{3}}},
				{row: row{Group: "single", Kind: kindShare}, result: result{Status: statusTimeout}},
				{row: row{Group: "pair", Kind: kindShare}, result: result{Status: statusOK, AbsErr: []float64{9, 9}}},
			},
			want: []string{"mean absolute error 2.00 points over 2 rows (goal <= 2)\n"},
			not:  []string{"contextMiB", "GPU time"}},
		{name: "beside the rates, the GPU time the device's busy figure gave a lone tenant", // (|12-10| + |29-30|)/2 = 1.50
			outs: []outcome{
				{row: row{Group: "single", Kind: kindShare, Tenants: []tenantSpec{{Cores: 10}}}, result: result{Status: statusOK, AbsErr: []float64{2.5}, GPUTime: []float64{12}}},
				{row: row{Group: "single", Kind: kindShare, Tenants: []tenantSpec{{Cores: 30}}}, result: result{Status: statusMiss, AbsErr: []float64{5.9}, GPUTime: []float64{29}}},
				{row: row{Group: "single", Kind: kindShare, Tenants: []tenantSpec{{Cores: 50}}}, result: result{Status: statusMiss, AbsErr: []float64{9.9}}},
			},
			want: []string{"mean absolute error 6.10 points over 3 rows (goal <= 2); in GPU time (the device's busy figure) 1.50 over 2\n"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := footer(tc.outs, "GPU", time.Second)
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("footer lacks %q:\n%s", w, got)
				}
			}
			for _, n := range tc.not {
				if strings.Contains(got, n) {
					t.Errorf("footer has %q:\n%s", n, got)
				}
			}
		})
	}
}

// A share row's whole note is kept (the fitted periods come last); only a
// runaway one is cut.
func TestOneLine(t *testing.T) {
	note := strings.Repeat("+0.3 -1.1; nvml per-pid sm% 92+89 (8+19 samples); ", 5) // 260 characters
	tests := []struct {
		name, in string
		want     int // length
		cut      bool
	}{
		{name: "a share row's note", in: note, want: len(strings.TrimSpace(note))},
		{name: "a share row's note with GPU time two ways", in: note + note, want: 2*len(note) - 1},
		{name: "a runaway note", in: note + note + note, want: maxNote, cut: true},
		{name: "lines joined", in: "a\n  b\tc", want: 5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := oneLine(tt.in)
			if len(got) != tt.want || strings.HasSuffix(got, "...") != tt.cut || strings.ContainsAny(got, "\n\t") {
				t.Errorf("oneLine: %d characters %q, want %d (cut %v)", len(got), got, tt.want, tt.cut)
			}
		})
	}
}
