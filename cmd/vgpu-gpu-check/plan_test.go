package main

import (
	"io"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func mustOptions(t *testing.T, args ...string) options {
	t.Helper()
	o, err := parseOptions(args, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

func names(rows []row) []string {
	out := make([]string, len(rows))
	for i, r := range rows {
		out[i] = r.Group + ": " + r.Name
		if r.Skip != "" {
			out[i] += " [skip: " + r.Skip + "]"
		}
	}
	return out
}

func TestPlan(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{name: "the default run: every row the issue asks for", want: []string{
			"context: context pytorch", "context: context cupy", "context: context probe",
			"memory: pytorch/default", "memory: pytorch/expandable", "memory: pytorch/async", "memory: cupy/default",
			"memory: probe/malloc", "memory: probe/cumemalloc", "memory: probe/managed", "memory: probe/async",
			"memory: probe/pitch", "memory: probe/vmm",
			"guard: memory guard, probe/malloc",
			"single: solo pytorch", "single: pytorch 10", "single: pytorch 30", "single: pytorch 50", "single: pytorch 70", "single: pytorch 90",
			"pair: pytorch 30+60", "pair: pytorch 50+50", "pair: pytorch unlimited x2",
			"slicing: back to back x2", "slicing: slots 20+20 of 40 ms, fill 0.90", "slicing: slots 20+20 of 40 ms, fill 0.95", "slicing: slots 20+20 of 40 ms, fill 1.00",
			"mixed: solo probe-elem", "mixed: pytorch 30 + probe-elem 60", "mixed: pytorch 50 + probe-elem 50",
			"mixed: pytorch + probe-elem unlimited",
			"triple: pytorch 20+30+40",
			"balance: pytorch 50 + balance 30",
			"mps: mps pytorch/default", "mps: mps pytorch 30+60", "mps: mps pytorch 50+50", "mps: mps pytorch 30 + probe-elem 60",
		}},
		{name: "the mps rows alone bring their solo rows; the pair of programs needs the probe", args: []string{"-only", "mps", "-use", "pytorch,cupy"}, want: []string{
			"mps: mps pytorch/default", "mps: solo pytorch", "mps: mps pytorch 30+60", "mps: mps pytorch 50+50",
			"mps: solo probe-elem [skip: probe is not in -use]",
			"mps: mps pytorch 30 + probe-elem 60 [skip: probe is not in -use]"}},
		{name: "a share group alone brings its solo row first", args: []string{"-only", "pair"}, want: []string{
			"pair: solo pytorch", "pair: pytorch 30+60", "pair: pytorch 50+50", "pair: pytorch unlimited x2"}},
		{name: "different programs need both: a program left out of -use skips the row", args: []string{"-only", "mixed", "-use", "pytorch"}, want: []string{
			"mixed: solo pytorch",
			"mixed: solo probe-elem [skip: probe is not in -use]",
			"mixed: pytorch 30 + probe-elem 60 [skip: probe is not in -use]",
			"mixed: pytorch 50 + probe-elem 50 [skip: probe is not in -use]",
			"mixed: pytorch + probe-elem unlimited [skip: probe is not in -use]"}},
		{name: "another share program", args: []string{"-only", "triple,balance", "-share-program", "cupy", "-use", "cupy"}, want: []string{
			"triple: solo cupy", "triple: cupy 20+30+40", "balance: cupy 50 + balance 30"}},
		{name: "the slicing rows need no program of -use", args: []string{"-only", "slicing", "-use", "cupy"}, want: []string{
			"slicing: back to back x2", "slicing: slots 20+20 of 40 ms, fill 0.90", "slicing: slots 20+20 of 40 ms, fill 0.95", "slicing: slots 20+20 of 40 ms, fill 1.00"}},
		{name: "memory rows of the programs in -use only", args: []string{"-only", "memory", "-use", "cupy"}, want: []string{"memory: cupy/default"}},
		{name: "the deep rows: PyTorch never synchronized, its own solo row", args: []string{"-only", "deep"}, want: []string{
			"deep: solo pytorch-deep", "deep: pytorch-deep 50+50", "deep: pytorch-deep 45+50", "deep: solo probe-elem", "deep: pytorch-deep 50 + probe-elem 50"}},
		{name: "the deep rows after mixed: the probe's solo row is done", args: []string{"-only", "mixed,deep", "-use", "pytorch,probe"}, want: []string{
			"mixed: solo pytorch", "mixed: solo probe-elem", "mixed: pytorch 30 + probe-elem 60", "mixed: pytorch 50 + probe-elem 50", "mixed: pytorch + probe-elem unlimited",
			"deep: solo pytorch-deep", "deep: pytorch-deep 50+50", "deep: pytorch-deep 45+50", "deep: pytorch-deep 50 + probe-elem 50"}},
		{name: "the deep rows run PyTorch", args: []string{"-only", "deep", "-use", "cupy"}, want: []string{
			"deep: solo pytorch-deep [skip: pytorch is not in -use]", "deep: pytorch-deep 50+50 [skip: pytorch is not in -use]",
			"deep: pytorch-deep 45+50 [skip: pytorch is not in -use]", "deep: solo probe-elem [skip: probe is not in -use]",
			"deep: pytorch-deep 50 + probe-elem 50 [skip: pytorch is not in -use]"}},
		{name: "the guard row runs the probe", args: []string{"-only", "guard", "-use", "pytorch"}, want: []string{
			"guard: memory guard, probe/malloc [skip: probe is not in -use (the guard row runs the probe)]"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if d := cmp.Diff(tc.want, names(plan(mustOptions(t, tc.args...)))); d != "" {
				t.Errorf("rows (-want +got):\n%s", d)
			}
		})
	}
}

// The default run must fit the 7m40s deadline on an H100 with room for
// building the probe and finding the programs (run.sh: nvcc ~20 s, imports
// ~10 s); the README gives the budget per row.
func TestDefaultPlanFitsTheDeadline(t *testing.T) {
	o := mustOptions(t)
	const startup = 60 * time.Second
	if got := planned(plan(o)) + startup; got > o.deadline {
		t.Errorf("default rows planned at %v + %v start-up > deadline %v: shorten -seconds or drop rows", planned(plan(o)), startup, o.deadline)
	}
}

func TestShareName(t *testing.T) {
	for _, tc := range []struct {
		name string
		ts   []tenantSpec
		want string
	}{
		{"one workload", []tenantSpec{{Work: "cupy", Cores: 20}, {Work: "cupy", Cores: 30}}, "cupy 20+30"},
		{"two workloads", []tenantSpec{{Work: "pytorch", Cores: 30}, {Work: "probe-elem", Cores: 60}}, "pytorch 30 + probe-elem 60"},
		{"balance beside the same workload", []tenantSpec{{Work: "pytorch", Cores: 50}, {Work: "pytorch", Cores: 30, Balance: true}}, "pytorch 50 + balance 30"},
		{"balance of another workload", []tenantSpec{{Work: "pytorch", Cores: 50}, {Work: "probe", Cores: 30, Balance: true}}, "pytorch 50 + probe balance 30"},
		{"unlimited, one workload", []tenantSpec{{Work: "pytorch", Unlimited: true}, {Work: "pytorch", Unlimited: true}}, "pytorch unlimited x2"},
		{"unlimited, two workloads", []tenantSpec{{Work: "pytorch", Unlimited: true}, {Work: "probe-elem", Unlimited: true}}, "pytorch + probe-elem unlimited"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := shareName(tc.ts); got != tc.want {
				t.Errorf("shareName = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestRenderPlan(t *testing.T) {
	got := renderPlan(plan(mustOptions(t, "-only", "pair,mixed", "-use", "pytorch")), 6*time.Minute)
	// solo 10+4+1, two pairs 10+4+2 each, the unlimited pair 6+4+2 = 59 s;
	// the probe's rows skipped
	for _, want := range []string{
		"pair     solo pytorch                          15s\n",
		"pair     pytorch 30+60                         16s\n",
		"pair     pytorch unlimited x2                  12s\n",
		"mixed    solo probe-elem                         -  probe is not in -use\n",
		"# 8 rows planned at 59s on an H100, inside -deadline 6m0s with 5m1s to spare",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("plan lacks %q:\n%s", want, got)
		}
	}
}

// The mixed rows run mixedFactor × -seconds (row.Secs), the unlimited rows
// unlimitedFactor ×, and are planned so; the others run -seconds.
func TestRowsRunFor(t *testing.T) {
	o, err := parseOptions([]string{"-only", "mixed,pair", "-seconds", "10"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	n := map[float64]int{}
	for _, r := range plan(o) {
		want := 0.0
		switch {
		case r.Kind != kindShare:
			continue
		case unlimitedAll(r.Tenants):
			want = 6
		case r.Group == "mixed":
			want = 16
		}
		n[want]++
		budget := shareBudget(10, len(r.Tenants))
		if want > 0 {
			budget = shareBudget(want, len(r.Tenants))
		}
		if r.Secs != want || r.Budget != budget {
			t.Errorf("%s: runs %g s, planned %v; want %g s (0: -seconds), %v", r.Name, r.Secs, r.Budget, want, budget)
		}
	}
	if d := cmp.Diff(map[float64]int{0: 2, 16: 2, 6: 2}, n); d != "" {
		t.Errorf("share rows by how long they run (-want +got):\n%s", d)
	}
}
