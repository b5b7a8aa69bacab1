package vgpu

import (
	"flag"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"

	"github.com/volcano-vgpu/volcano-vgpu/api"
	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/metrics"
	"github.com/volcano-vgpu/volcano-vgpu/plugins/placement"
)

var updateSeries = flag.Bool("update-series", false, "rewrite installer/testdata/series-scheduler.txt")

// TestCodeNames: every code of the placement core has a reason label, and
// the labels are distinct.
func TestCodeNames(t *testing.T) {
	seen := map[string]bool{}
	for c := placement.Code(1); c < maxCode; c++ {
		_, named := codeNames[c]
		if isCode := (placement.Reason{Code: c}).Unwrap() != nil; named != isCode {
			t.Errorf("code %d: named %v, a code of the placement core %v", c, named, isCode)
		}
	}
	for _, n := range codeNames {
		if seen[n] {
			t.Errorf("reason label %q names two codes", n)
		}
		seen[n] = true
	}
}

// metricsSession is a hand session whose plugin exports to a fresh registry:
// "pairs" has 4 GPUs on NVLink pairs, GPUs 0 and 2 held exclusively with
// 8192 MiB each (so the only free GPUs, 1 and 3, are not a pair); "mixed"
// has 4 free GPUs on NVLink pairs; "bare" publishes no inventory.
func metricsSession(t *testing.T) (*handSession, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	shared := NewShared(func() time.Time { return testNow })
	shared.ExportMetrics(reg)
	shared.metrics.sampleMask = 0 // time every predicate call
	nodes := []*corev1.Node{
		newGPUNode("pairs", "A100-40GB", 4, 40960).nvlinkPairs().obj(t),
		newGPUNode("free", "A100-40GB", 4, 40960).nvlinkPairs().obj(t),
		newGPUNode("bare", "A100-40GB", 1, 40960).noInventory().obj(t),
	}
	pods := []*corev1.Pod{
		newPod("ns", "x0").group("x0").gpus(1, 8192, 100).on("pairs", corev1.PodRunning).
			assigned(t, api.DeviceShare{UUID: "GPU-pairs-0", MemoryMiB: 8192, Cores: 100}).obj(),
		newPod("ns", "x2").group("x2").gpus(1, 8192, 100).on("pairs", corev1.PodRunning).
			assigned(t, api.DeviceShare{UUID: "GPU-pairs-2", MemoryMiB: 8192, Cores: 100}).obj(),
		gpuPod("ns", "two", "two", 2, 8192, 50),
		gpuPod("ns", "two-free", "two-free", 2, 8192, 50),
		gpuPod("ns", "huge", "huge", 1, 204800, 10),
	}
	return newHandSession(t, shared, DefaultArgs(), nodes, pods), reg
}

// TestSchedulerMetrics drives the plugin's hooks and reads the exposition.
func TestSchedulerMetrics(t *testing.T) {
	h, reg := metricsSession(t)
	for _, n := range h.nodeList() {
		_ = h.plugin.predicate(h.tasks["huge"], n) // refused everywhere
	}
	if ev := allocateOn(h, "two", "pairs"); ev.Err != nil {
		t.Fatal(ev.Err)
	}
	if ev := allocateOn(h, "two-free", "free"); ev.Err != nil {
		t.Fatal(ev.Err)
	}
	if _, err := h.plugin.batchNodeOrder(h.tasks["huge"], h.nodeList()); err != nil {
		t.Fatal(err)
	}
	h.plugin.OnSessionClose(h.plugin.ssn)

	multi := `
# HELP volcano_vgpu_scheduler_multi_gpu_placements_total Containers of two or more GPUs the vgpu plugin booked, by whether they got their node's best-linked GPU set (best_linked=true|false).
# TYPE volcano_vgpu_scheduler_multi_gpu_placements_total counter
volcano_vgpu_scheduler_multi_gpu_placements_total{best_linked="false"} 1
volcano_vgpu_scheduler_multi_gpu_placements_total{best_linked="true"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(multi), "volcano_vgpu_scheduler_multi_gpu_placements_total"); err != nil {
		t.Error(err)
	}
	// pairs: GPUs 0 and 2 held exclusively strand their 32768 MiB free;
	// GPUs 1 and 3 hold 8192 MiB with 50% of the cores, so later tenants
	// in that proportion use 8192 MiB more and 24576 MiB are stranded.
	// free: the same on the pair the container took, the other pair idle.
	const mib = 1 << 20
	stranded := `
# HELP volcano_vgpu_scheduler_node_memory_stranded_bytes Free GPU memory of a node no later tenant could use (cores or tenant slots run out first), as booked at the last session's close.
# TYPE volcano_vgpu_scheduler_node_memory_stranded_bytes gauge
volcano_vgpu_scheduler_node_memory_stranded_bytes{node="free"} 5.1539607552e+10
volcano_vgpu_scheduler_node_memory_stranded_bytes{node="pairs"} 1.20259084288e+11
`
	if 2*24576*mib != 51539607552 || (2*32768+2*24576)*mib != 120259084288 {
		t.Fatal("the expected figures above are wrong")
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(stranded), "volcano_vgpu_scheduler_node_memory_stranded_bytes"); err != nil {
		t.Error(err)
	}

	// A node that left: its series goes at the next close.
	h.plugin.shared.metrics.setStranded(map[string]*placement.Node{"free": {Name: "free"}})
	if err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP volcano_vgpu_scheduler_node_memory_stranded_bytes Free GPU memory of a node no later tenant could use (cores or tenant slots run out first), as booked at the last session's close.
# TYPE volcano_vgpu_scheduler_node_memory_stranded_bytes gauge
volcano_vgpu_scheduler_node_memory_stranded_bytes{node="free"} 0
`), "volcano_vgpu_scheduler_node_memory_stranded_bytes"); err != nil {
		t.Errorf("after the node left: %v", err)
	}

	got := map[string]float64{}
	var labels []string
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	hooks := map[string]uint64{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			switch f.GetName() {
			case "volcano_vgpu_scheduler_unschedulable_total":
				l := m.GetLabel()[0].GetValue()
				labels = append(labels, l)
				if v := m.GetCounter().GetValue(); v != 0 {
					got[l] = v
				}
			case "volcano_vgpu_scheduler_hook_duration_seconds":
				hooks[m.GetLabel()[0].GetValue()] = m.GetHistogram().GetSampleCount()
			}
		}
	}
	// huge refused on pairs (no GPU with the memory; two held exclusively),
	// on free (memory) and on bare (no inventory).
	if diff := cmp.Diff(map[string]float64{"memory": 2, "exclusive_held": 1, reasonNoInventory: 1}, got); diff != "" {
		t.Errorf("unschedulable reasons counted (-want +got):\n%s", diff)
	}
	var want []string
	for _, n := range codeNames {
		want = append(want, n)
	}
	want = append(want, reasonNoInventory, reasonMalformedInventory, reasonInvalidArguments)
	slices.Sort(want)
	if diff := cmp.Diff(want, labels); diff != "" {
		t.Errorf("reason label set (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]uint64{"session_open": 0, "pre_predicate": 0, "predicate": 3, "node_order": 1,
		"allocate": 2, "deallocate": 0, "session_close": 1}, hooks); diff != "" {
		t.Errorf("hook calls timed (-want +got):\n%s", diff)
	}
}

// TestSeriesList: installer/testdata/series-scheduler.txt lists the series
// the scheduler plugin exports, for the alert rules' check
// (installer/promcheck).
func TestSeriesList(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	m.setStranded(map[string]*placement.Node{"n": {Name: "n"}}) // a vector with no child is not gathered
	names, err := metrics.SeriesNames(reg)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join("..", "..", "installer", "testdata", "series-scheduler.txt")
	if err := metrics.SeriesFile(path, names, *updateSeries); err != nil {
		t.Error(err)
	}
}

// TestPredicateSampled: by default about one predicate call in 16 is timed
// (1600 calls: 100 expected; the bounds are over 6 standard deviations out).
func TestPredicateSampled(t *testing.T) {
	h, reg := metricsSession(t)
	h.plugin.shared.metrics.sampleMask = predicateSample - 1
	node := h.nodes["free"]
	for range 1600 {
		_ = h.plugin.predicate(h.tasks["two"], node)
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var timed uint64
	for _, f := range families {
		for _, m := range f.GetMetric() {
			if f.GetName() == "volcano_vgpu_scheduler_hook_duration_seconds" && m.GetLabel()[0].GetValue() == "predicate" {
				timed = m.GetHistogram().GetSampleCount()
			}
		}
	}
	if timed < 40 || timed > 180 {
		t.Errorf("%d of 1600 predicate calls timed, want about 100", timed)
	}
}
