package report

import (
	"bytes"
	"flag"
	"fmt"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/volcano-vgpu/volcano-vgpu/e2e/bench/metrics"
	"github.com/volcano-vgpu/volcano-vgpu/e2e/bench/runner"
	"github.com/volcano-vgpu/volcano-vgpu/e2e/bench/trace"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden")

func result(setup string, run int, pps, cpu float64, bound int, prefix float64, p metrics.Packing) runner.Result {
	return runner.Result{Setup: setup, Run: run, Pods: 100, Bound: bound, AllBound: bound == 100,
		CreateSeconds: 2, BindSeconds: float64(bound) / pps, PodsPerSecond: pps,
		SchedulerCPUSeconds: cpu, SchedulerPeakRSSMiB: 200, Prefix: metrics.Prefix{Pods: prefix}, Packing: p}
}

func sampleInput() Input {
	good := metrics.Packing{GPUsUsed: 60, PartlyUsed: 4, MultiGPU: 10, BestLinked: 10}
	bad := metrics.Packing{GPUsUsed: 70, PartlyUsed: 20, OverBooked: 3, MultiGPU: 8, BestLinked: 4}
	return Input{
		Command: "make bench-e2e", Date: "2025-01-02",
		Machine: Machine{CPUs: 2, Model: "Test CPU", MemoryGiB: 8, LoadBefore: 3.5, LoadAfter: 4.25},
		Cluster: "2 nodes, 16 GPUs", Seed: 1, Trace: trace.Totals{Jobs: 90, Pods: 100, WholeGPUs: 40, MultiGPUContainers: 10},
		Runs: 3, Workers: 32, Minutes: 18.5, Timeout: "3m0s", Stall: "1m0s", ChartPNG: "benchmarks.png",
		Agents:  Agents{DevicePlugins: 2, DevicePluginRSSMiB: 61.5, EmulatorRSSMiB: 30},
		Sandbox: "sees them in a private mount namespace.",
		Results: []runner.Result{
			result(VGPU, 1, 50, 10, 100, 1, good), result(Deviceshare, 1, 2, 80, 60, 0.4, bad), result(CPUOnly, 1, 60, 8, 100, 1, metrics.Packing{}),
			result(VGPU, 2, 40, 12, 100, 1, good), result(Deviceshare, 2, 3, 90, 70, 0.5, bad), result(CPUOnly, 2, 55, 9, 100, 1, metrics.Packing{}),
			result(VGPU, 3, 45, 11, 100, 1, good), result(Deviceshare, 3, 1, 70, 50, 0.3, bad), result(CPUOnly, 3, 65, 7, 100, 1, metrics.Packing{}),
		},
	}
}

// costedInput is sampleInput with sessions counted in every run and a
// profile of the vgpu runs (deviceshare's second run not counted).
func costedInput() Input {
	in := sampleInput()
	for i := range in.Results {
		r := &in.Results[i]
		if r.Setup == Deviceshare && r.Run == 2 {
			continue
		}
		r.Sessions = 10 * (r.Run + 1)
		r.NodeAgentCPUSeconds, r.APIServerCPUSeconds = 3+float64(r.Run), 20
		if r.Setup == VGPU {
			r.OwnCPUShare = 0.04 + 0.01*float64(r.Run)
		}
		if r.Setup != Deviceshare {
			r.ProfileShares = map[string]float64{runner.PartSeconds: 30 + float64(r.Run), runner.PartPredicate: 0.1 + 0.01*float64(r.Run),
				runner.PartScore: 0.4, runner.PartGC: 0.25}
			if r.Setup == VGPU {
				r.ProfileShares[runner.PartPredicateOurs], r.ProfileShares[runner.PartScoreOurs] = 0.02, 0.03
			}
		}
	}
	return in
}

func TestSummarizeCosts(t *testing.T) {
	rows := Summarize(costedInput().Results)
	v, d, c := rows[0], rows[1], rows[2]
	// vgpu: CPU (10,12,11) s over (20,30,40) sessions -> 500, 400, 275 ms; share (5,6,7)%.
	if v.Sessions != 30 || v.CPUPerSessionMs != 400 || v.CPUPerPodMs != 110 || math.Abs(v.OwnCPUShare-0.06) > 1e-12 {
		t.Errorf("vgpu costs: sessions %v, %v ms/session, %v ms/pod, own %v", v.Sessions, v.CPUPerSessionMs, v.CPUPerPodMs, v.OwnCPUShare)
	}
	// deviceshare: one run not counted reads as 0 sessions, as the table's "—" would
	if d.Sessions != 20 || d.OwnCPUShare != 0 {
		t.Errorf("deviceshare costs: sessions %v, own %v", d.Sessions, d.OwnCPUShare)
	}
	if c.OwnCPUShare != 0 || c.CPUPerSessionMs != 300 {
		t.Errorf("cpu-only costs: %v ms/session, own %v", c.CPUPerSessionMs, c.OwnCPUShare)
	}
	if v.ProfiledSeconds != 32 || math.Abs(v.PredicateShare-0.12) > 1e-12 || v.PredicateOursShare != 0.02 || v.ScoreOursShare != 0.03 ||
		math.Abs(v.Rest()-0.23) > 1e-12 || c.PredicateOursShare != 0 || d.ProfiledSeconds != 0 {
		t.Errorf("profile phases: vgpu %+v, cpu-only %+v, deviceshare %+v", v, c, d)
	}
	if costed(Summarize(sampleInput().Results)) {
		t.Error("a report without sessions or profiles got the cost table")
	}
}

func TestSummarizeTakesMedians(t *testing.T) {
	rows := Summarize(sampleInput().Results)
	if len(rows) != 3 || rows[0].Setup != VGPU || rows[1].Setup != Deviceshare || rows[2].Setup != CPUOnly {
		t.Fatalf("rows %+v: want vgpu, deviceshare, cpu-only", rows)
	}
	d := rows[1]
	// medians of (2,3,1) pods/s, (80,90,70) CPU s, (60,70,50) bound; no run bound all 100.
	if d.PodsPerSecond != 2 || d.SchedulerCPUSeconds != 80 || d.Bound != 60 || d.AllBoundRuns != 0 || d.BestLinkedShare != 0.5 {
		t.Errorf("deviceshare row %+v", d)
	}
	if rows[2].GPU {
		t.Error("cpu-only row claims GPUs")
	}
}

func TestHeadline(t *testing.T) {
	got := Headline(Summarize(sampleInput().Results))
	want := []string{
		// medians: vgpu 45 pods/s, cpu-only 60 → 75%; deviceshare 2 → 22.5×
		"Throughput: 100 of 100 pods bound in 2.22 s, 45.0 pods/s (75% of Volcano's CPU-only ceiling here, 60.0 pods/s); deviceshare 2.00 pods/s (60 bound), 22.5× the rate. Scheduler CPU 11.0 vs 80.0 s.",
		"Packing: 100% of the trace placed before the first unschedulable job vs 40% for deviceshare.",
		"Topology and fragmentation: 100% vs 50% of multi-GPU containers on the best-connected GPU set available; 4 vs 20 GPUs partly used, 0 vs 3 over-booked.",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestNothingBoundHasNoPacking(t *testing.T) {
	in := sampleInput()
	for i := range in.Results {
		if in.Results[i].Setup == Deviceshare {
			in.Results[i] = result(Deviceshare, i, 0, 3, 0, 0, metrics.Packing{})
		}
	}
	rows := Summarize(in.Results)
	if rows[1].GPU {
		t.Error("deviceshare bound nothing yet its packing columns apply")
	}
	got := Headline(rows)[2]
	if want := "Topology and fragmentation: 100% of multi-GPU containers on the best-connected GPU set available, 60 GPUs used, 4 partly used, 0 over-booked; deviceshare placed nothing to compare."; got != want {
		t.Errorf("got %q\nwant %q", got, want)
	}
}

// packingInput is an oversubscribed run on grouped device plugins with
// the offline reference.
func packingInput() Input {
	in := sampleInput()
	in.SimFile = "e2e/sim/clusters/bench.yaml"
	in.Agents = Agents{DevicePlugins: 1, DevicePluginNodes: 200, DevicePluginRSSMiB: 2048, EmulatorRSSMiB: 150}
	// 16 GPUs of 40960 MiB = 655360 MiB
	in.Load = Load{Asked: 1.3, Demand: trace.Demand{Memory: 1.35, GPUs: 1.31}, Capacity: trace.Capacity{GPUs: 16, MemoryMiB: 655360}}
	in.Reference = &Reference{Algorithm: "best-fit decreasing", Pods: 90, Seconds: 0.5,
		MemoryMiB: map[string]int64{"first-fit decreasing": 600000, "best-fit decreasing": 640000},
		Packing:   metrics.Packing{GPUsUsed: 16, PartlyUsed: 1, MemoryMiB: 640000}}
	for i := range in.Results {
		if in.Results[i].Setup == VGPU {
			in.Results[i].Packing.MemoryMiB = 627200 // 98% of the reference's 640000
		}
	}
	return in
}

// failedInput has vgpu's third run failed and transient failures retried
// in two measured runs, creation paced.
func failedInput() Input {
	in := sampleInput()
	in.QPS = 200
	in.Backlog = true // and created with vc-scheduler stopped
	in.Results[1].Retries, in.Results[1].RetryReasons = 3, "2 stream reset, 1 500 internal error"
	in.Results[5].Retries, in.Results[5].RetryReasons = 1, "1 429 too many requests"
	in.Results[6] = runner.Result{Setup: VGPU, Run: 3, Pods: 100, Retries: 10, RetryReasons: "10 stream reset",
		Failed: "creating pods: still failing after every retry (10 attempts): stream error: stream ID 7119; INTERNAL_ERROR; received from peer"}
	return in
}

func TestSummarizeLeavesFailedRunsOut(t *testing.T) {
	in := failedInput()
	rows := Summarize(in.Results)
	// vgpu's measured runs: 50 and 40 pods/s → median 45; the failed run's 0 is not counted
	if rows[0].Setup != VGPU || rows[0].Runs != 2 || rows[0].PodsPerSecond != 45 {
		t.Errorf("vgpu row = %+v, want 2 runs at a median of 45 pods/s", rows[0])
	}
	if f := Failures(in.Results); len(f) != 1 || f[0].Setup != VGPU || f[0].Run != 3 {
		t.Errorf("Failures = %+v, want vgpu run 3", f)
	}
	if r := Retried(in.Results); len(r) != 2 {
		t.Errorf("Retried = %+v, want the two measured runs with retries", r)
	}
	in.Results = in.Results[6:7]
	if rows := Summarize(in.Results); len(rows) != 0 {
		t.Errorf("only a failed run: rows = %+v, want none", rows)
	}
}

func TestMarkdownGolden(t *testing.T) {
	for _, tc := range []struct {
		name, golden string
		in           Input
	}{
		{name: "fitting trace", golden: "benchmarks.golden.md", in: sampleInput()},
		{name: "sessions and profiles", golden: "benchmarks-costed.golden.md", in: costedInput()},
		{name: "oversubscribed with the reference", golden: "benchmarks-packing.golden.md", in: packingInput()},
		{name: "a failed run and retried creates", golden: "benchmarks-failed.golden.md", in: failedInput()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Markdown(tc.in)
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join("testdata", tc.golden)
			if *update {
				if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run go test -update to create it)", err)
			}
			if diff := cmp.Diff(string(want), got); diff != "" {
				t.Errorf("report changed (-golden +got); rerun with -update if intended:\n%s", diff)
			}
		})
	}
}

func TestPackingRows(t *testing.T) {
	in := packingInput()
	rows := PackingRows(in.Results, in.Reference, in.Load.Capacity)
	var got []string
	for _, r := range rows {
		got = append(got, fmt.Sprintf("%s %.2f %.2f", r.Setup, r.OfRef, r.OverBooked))
	}
	// vgpu 627200/640000 = 0.98; deviceshare books nothing it reports (0);
	// the reference is 1 of itself; cpu-only has no row
	want := []string{"vgpu 0.98 0.00", "deviceshare 0.00 3.00", "offline reference 1.00 0.00"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("rows (-want +got):\n%s", diff)
	}
}

func TestChartIsAPNG(t *testing.T) {
	data, err := Chart(Summarize(sampleInput().Results))
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	if b := img.Bounds(); b.Dx() < 600 || b.Dy() < 200 {
		t.Errorf("chart is %v", b)
	}
}

func TestNoGPUPluginChoosesNoGPUs(t *testing.T) {
	in := sampleInput()
	var extra []runner.Result
	for _, r := range in.Results {
		if r.Setup == CPUOnly {
			r.Setup = NoGPUPlugin
			extra = append(extra, r)
		}
	}
	in.Results = append(in.Results, extra...)
	rows := Summarize(in.Results)
	last := rows[len(rows)-1]
	if last.Setup != NoGPUPlugin || last.GPU || last.PrefixPods >= 0 {
		t.Fatalf("last row %s with GPU %t, prefix %v; want %s without GPU columns or prefix", last.Setup, last.GPU, last.PrefixPods, NoGPUPlugin)
	}
	for _, p := range PackingRows(in.Results, in.Reference, in.Load.Capacity) {
		if p.Setup == NoGPUPlugin {
			t.Errorf("packing row for %s, which chose no GPU", NoGPUPlugin)
		}
	}
	md, err := Markdown(in)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(md, "`no-gpu-plugin` with the same configuration and vgpu's pods") {
		t.Error("the report does not say what no-gpu-plugin ran")
	}
}
