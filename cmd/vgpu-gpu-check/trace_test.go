package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/volcano-vgpu/volcano-vgpu/api"
	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/compute"
)

func TestTraceFile(t *testing.T) {
	tests := []struct {
		name string
		r    row
		want string
	}{
		{name: "pair", r: row{Group: "pair", Name: "pytorch 30+60"}, want: "pair-pytorch-30-60.tsv"},
		{name: "mixed, spaces and plus signs collapse", r: row{Group: "mixed", Name: "pytorch 30 + probe-elem 60"}, want: "mixed-pytorch-30-probe-elem-60.tsv"},
		{name: "no path separator survives", r: row{Group: "x", Name: "../../etc/passwd"}, want: "x-etc-passwd.tsv"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := traceFile(tc.r); got != tc.want {
				t.Errorf("traceFile = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestPeriodTrace(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "trace")
	r := row{Group: "mixed", Name: "pytorch 30 + probe-elem 60"}
	tr, err := openTrace(dir, r, map[string]string{"uid-a": "0:pytorch@30"})
	if err != nil {
		t.Fatal(err)
	}
	tr.observe(compute.Observation{Busy: 0.9, Period: 23 * time.Millisecond, ClockMHz: 1549, Lag: 15 * time.Millisecond, Fitted: true, Decisions: []compute.Decision{
		{Key: "uid-a", Share: 0.3, Lent: -0.045, Measured: 0.31, Cost: 125, Units: 8.8e4, Control: api.ControlDevice{Mode: api.ControlLimited, Rate: 4.2e-4,
			Slot: api.Slot{PeriodUs: 33333, StartUs: 0, LenUs: 10000, Confine: true}}},
		{Key: "uid-b", Share: 0.6, Measured: 0.59, Cost: 1000, Units: 1.1e5, Control: api.ControlDevice{Mode: api.ControlLimited, Rate: 5.4e-4}},
	}})
	if err := tr.close(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "mixed-pytorch-30-probe-elem-60.tsv"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) != 3 {
		t.Fatalf("%d lines, want a header and one per tenant:\n%s", len(lines), b)
	}
	head := strings.Split(lines[0], "\t")
	for i, want := range [][]string{
		{"busy=0.9000", "period_ms=23.0", "clock_mhz=1549", "lag_ms=15.0", "fitted=true", "tenant=0:pytorch@30", "target=0.3000", "lent=-0.0450", "cost_ns=125", "rate_per_s=4.2e+05", "mode=1", "slot_us=10000", "confine=true"},
		{"tenant=uid-b", "measured=0.5900", "units=1.1e+05", "slot_us=0", "confine=false"}, // a key the row does not name: as is
	} {
		fields := strings.Split(lines[i+1], "\t")
		if len(fields) != len(head) {
			t.Fatalf("line %d has %d fields, the header %d:\n%s", i+1, len(fields), len(head), b)
		}
		got := map[string]string{}
		for j, h := range head {
			got[h] = fields[j]
		}
		for _, kv := range want {
			k, v, _ := strings.Cut(kv, "=")
			if got[k] != v {
				t.Errorf("line %d: %s = %q, want %q", i+1, k, got[k], v)
			}
		}
	}
	var none *periodTrace // without -trace: observing and closing do nothing
	none.observe(compute.Observation{Busy: 1})
	if err := none.close(); err != nil {
		t.Errorf("close of no trace: %v", err)
	}
}
