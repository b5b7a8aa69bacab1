// Package report summarizes benchmark runs (median per setup, ratios
// against deviceshare) and renders docs/benchmarks.md and its chart.
package report

import (
	"bytes"
	"fmt"
	"math"
	"slices"
	"strings"
	"text/template"

	"github.com/volcano-vgpu/volcano-vgpu/e2e/bench/metrics"
	"github.com/volcano-vgpu/volcano-vgpu/e2e/bench/runner"
	"github.com/volcano-vgpu/volcano-vgpu/e2e/bench/trace"
)

// Setup names, in table order.
const (
	VGPU        = "vgpu"
	Deviceshare = "deviceshare"
	CPUOnly     = "cpu-only"
	// NoGPUPlugin: vgpu's pods, GPU requests included, scheduled by the
	// cpu-only configuration: what Volcano itself spends on GPU pods (their
	// extended resources), placed by node totals with no GPU chosen.
	NoGPUPlugin = "no-gpu-plugin"
)

// Machine describes where the runs happened (no host names, no paths).
type Machine struct {
	CPUs      int
	Model     string
	MemoryGiB int
	// LoadBefore/LoadAfter: 1-minute load average when the benchmark
	// started and ended (others share the machine).
	LoadBefore, LoadAfter float64
}

// Agents is the node-side processes' memory at the end of the benchmark.
type Agents struct {
	DevicePlugins      int     // processes
	DevicePluginNodes  int     // nodes they simulate (more than DevicePlugins when grouped)
	DevicePluginRSSMiB float64 // total VmRSS of all device plugins
	EmulatorRSSMiB     float64
}

// Input is everything a report is made of.
type Input struct {
	Command  string
	Date     string
	Machine  Machine
	Cluster  string // e.g. "200 nodes × 8 GPUs (…)"
	Seed     uint64
	Trace    trace.Totals
	Runs     int
	Workers  int
	QPS      float64 // creates per second, all creators together (0: unpaced)
	Timeout  string
	Stall    string
	Results  []runner.Result
	Agents   Agents
	Sandbox  string // how deviceshare got its in-cluster credentials
	ChartPNG string // file name of the chart, beside the document
	RawFile  string // where the raw results were written, relative to the repository
	// Minutes is the wall time of the whole invocation, cluster start and
	// stop included.
	Minutes float64
	// Note is an optional paragraph on deviceshare (e.g. a longer run made by hand).
	Note string
	// SimFile is the simulated-cluster file, relative to the repository.
	SimFile string
	// Load is what the trace asks of the cluster.
	Load Load
	// Backlog: every pod was created with vc-scheduler stopped and binding
	// is timed from its start (-backlog).
	Backlog bool `json:",omitempty"`
	// Reference is the offline packing of the trace (nil: not computed).
	Reference *Reference
}

// Row is the median of one setup's runs.
type Row struct {
	Setup               string
	Runs                int
	Pods                int
	Bound               float64
	AllBoundRuns        int
	GroupSeconds        float64
	CreateSeconds       float64
	BindSeconds         float64
	PodsPerSecond       float64
	SchedulerCPUSeconds float64
	SchedulerPeakRSSMiB float64
	PrefixPods          float64 // share of the trace placed before the first unschedulable job
	GPU                 bool    // the packing columns apply: a GPU setup that bound pods
	GPUsUsed            float64
	PartlyUsed          float64
	OverBooked          float64
	BestLinkedShare     float64 // BestLinked / MultiGPU
	MultiGPU            float64
	Unknown             float64
	MemoryMiB           float64 // GPU memory placed
	// Sessions: scheduling sessions per run (0: not counted);
	// CPUPerSessionMs and CPUPerPodMs divide each run's scheduler CPU.
	Sessions        float64
	CPUPerSessionMs float64
	CPUPerPodMs     float64
	// OwnCPUShare: this repository's code's share of the scheduler's
	// profiled CPU (0: no profile, or none of it ran).
	OwnCPUShare float64
	// The profile's phases as shares of its CPU (runner.Part*; 0: no
	// profile), and the CPU seconds it sampled.
	PredicateShare, PredicateOursShare, ScoreShare, ScoreOursShare, GCShare float64
	ProfiledSeconds                                                         float64
	// CPU beside the scheduler during the run, on the same cores here.
	NodeAgentCPUSeconds, APIServerCPUSeconds float64
}

// Summarize returns one row per setup with a measured run, in the order
// setups first appear; failed runs (Failures) are left out of the medians.
func Summarize(results []runner.Result) []Row {
	var order []string
	by := map[string][]runner.Result{}
	for _, r := range results {
		if r.Failed != "" {
			continue
		}
		if _, ok := by[r.Setup]; !ok {
			order = append(order, r.Setup)
		}
		by[r.Setup] = append(by[r.Setup], r)
	}
	var rows []Row
	for _, name := range order {
		rs := by[name]
		med := func(f func(runner.Result) float64) float64 {
			xs := make([]float64, len(rs))
			for i, r := range rs {
				xs[i] = f(r)
			}
			return metrics.Median(xs)
		}
		row := Row{Setup: name, Runs: len(rs), Pods: rs[0].Pods, GPU: name != CPUOnly && name != NoGPUPlugin}
		bound := 0
		for _, r := range rs {
			bound += r.Bound
		}
		row.GPU = row.GPU && bound > 0 // no placement to measure
		for _, r := range rs {
			if r.AllBound {
				row.AllBoundRuns++
			}
		}
		row.Bound = med(func(r runner.Result) float64 { return float64(r.Bound) })
		row.GroupSeconds = med(func(r runner.Result) float64 { return r.GroupSeconds })
		row.CreateSeconds = med(func(r runner.Result) float64 { return r.CreateSeconds })
		row.BindSeconds = med(func(r runner.Result) float64 { return r.BindSeconds })
		row.PodsPerSecond = med(func(r runner.Result) float64 { return r.PodsPerSecond })
		row.SchedulerCPUSeconds = med(func(r runner.Result) float64 { return r.SchedulerCPUSeconds })
		row.SchedulerPeakRSSMiB = med(func(r runner.Result) float64 { return r.SchedulerPeakRSSMiB })
		row.PrefixPods = med(func(r runner.Result) float64 { return r.Prefix.Pods })
		if name == NoGPUPlugin {
			// Bound without a GPU assigned, its pods fail admission on their
			// nodes and their jobs replace them: no prefix to read.
			row.PrefixPods = -1
		}
		row.GPUsUsed = med(func(r runner.Result) float64 { return float64(r.Packing.GPUsUsed) })
		row.PartlyUsed = med(func(r runner.Result) float64 { return float64(r.Packing.PartlyUsed) })
		row.OverBooked = med(func(r runner.Result) float64 { return float64(r.Packing.OverBooked) })
		row.MultiGPU = med(func(r runner.Result) float64 { return float64(r.Packing.MultiGPU) })
		row.Unknown = med(func(r runner.Result) float64 { return float64(r.Packing.Unknown) })
		row.MemoryMiB = med(func(r runner.Result) float64 { return float64(r.Packing.MemoryMiB) })
		row.Sessions = med(func(r runner.Result) float64 { return float64(r.Sessions) })
		row.CPUPerSessionMs = med(func(r runner.Result) float64 {
			if r.Sessions == 0 {
				return 0
			}
			return 1000 * r.SchedulerCPUSeconds / float64(r.Sessions)
		})
		row.CPUPerPodMs = med(func(r runner.Result) float64 {
			if r.Bound == 0 {
				return 0
			}
			return 1000 * r.SchedulerCPUSeconds / float64(r.Bound)
		})
		row.OwnCPUShare = med(func(r runner.Result) float64 { return r.OwnCPUShare })
		part := func(key string) float64 {
			return med(func(r runner.Result) float64 { return r.ProfileShares[key] })
		}
		row.PredicateShare, row.PredicateOursShare = part(runner.PartPredicate), part(runner.PartPredicateOurs)
		row.ScoreShare, row.ScoreOursShare = part(runner.PartScore), part(runner.PartScoreOurs)
		row.GCShare, row.ProfiledSeconds = part(runner.PartGC), part(runner.PartSeconds)
		row.NodeAgentCPUSeconds = med(func(r runner.Result) float64 { return r.NodeAgentCPUSeconds })
		row.APIServerCPUSeconds = med(func(r runner.Result) float64 { return r.APIServerCPUSeconds })
		row.BestLinkedShare = med(func(r runner.Result) float64 {
			if r.Packing.MultiGPU == 0 {
				return 0
			}
			return float64(r.Packing.BestLinked) / float64(r.Packing.MultiGPU)
		})
		rows = append(rows, row)
	}
	return rows
}

// Rest is the share of the profile outside the phases and the collector.
func (r Row) Rest() float64 { return max(1-r.PredicateShare-r.ScoreShare-r.GCShare, 0) }

// phased reports whether any row has its profile's phases.
func phased(rows []Row) bool {
	for _, r := range rows {
		if r.ProfiledSeconds > 0 {
			return true
		}
	}
	return false
}

// costed reports whether any row has sessions counted or a profile read.
func costed(rows []Row) bool {
	for _, r := range rows {
		if r.Sessions > 0 || r.OwnCPUShare > 0 {
			return true
		}
	}
	return false
}

// Failures returns the runs that ended without a measurement.
func Failures(results []runner.Result) []runner.Result {
	var out []runner.Result
	for _, r := range results {
		if r.Failed != "" {
			out = append(out, r)
		}
	}
	return out
}

// Retried returns the measured runs that met transient failures on the
// way (retried, so the run still counts).
func Retried(results []runner.Result) []runner.Result {
	var out []runner.Result
	for _, r := range results {
		if r.Failed == "" && r.Retries > 0 {
			out = append(out, r)
		}
	}
	return out
}

// Headline is our plugin against deviceshare, as README lines.
func Headline(rows []Row) []string {
	var v, d, c *Row
	for i := range rows {
		switch rows[i].Setup {
		case VGPU:
			v = &rows[i]
		case Deviceshare:
			d = &rows[i]
		case CPUOnly:
			c = &rows[i]
		}
	}
	if v == nil || d == nil {
		return nil
	}
	ours := fmt.Sprintf("%s of %d pods bound in %s s, %s pods/s", count(v.Bound), v.Pods, num(v.BindSeconds), num(v.PodsPerSecond))
	if c != nil && c.PodsPerSecond > 0 {
		ours += fmt.Sprintf(" (%s of Volcano's CPU-only ceiling here, %s pods/s)", pct(v.PodsPerSecond/c.PodsPerSecond), num(c.PodsPerSecond))
	}
	theirs := fmt.Sprintf("deviceshare %s pods/s (%s bound), %s the rate", num(d.PodsPerSecond), count(d.Bound), ratio(v.PodsPerSecond, d.PodsPerSecond))
	if d.Bound == 0 {
		theirs = "deviceshare bound none"
	}
	lines := []string{
		fmt.Sprintf("Throughput: %s; %s. Scheduler CPU %s vs %s s.", ours, theirs, num(v.SchedulerCPUSeconds), num(d.SchedulerCPUSeconds)),
		fmt.Sprintf("Packing: %s of the trace placed before the first unschedulable job vs %s for deviceshare.",
			pct(v.PrefixPods), pct(d.PrefixPods)),
	}
	if !d.GPU {
		return append(lines, fmt.Sprintf("Topology and fragmentation: %s of multi-GPU containers on the best-connected GPU set available, %s GPUs used, %s partly used, %s over-booked; deviceshare placed nothing to compare.",
			pct(v.BestLinkedShare), count(v.GPUsUsed), count(v.PartlyUsed), count(v.OverBooked)))
	}
	return append(lines, fmt.Sprintf("Topology and fragmentation: %s vs %s of multi-GPU containers on the best-connected GPU set available; %s vs %s GPUs partly used, %s vs %s over-booked.",
		pct(v.BestLinkedShare), pct(d.BestLinkedShare), count(v.PartlyUsed), count(d.PartlyUsed), count(v.OverBooked), count(d.OverBooked)))
}

func num(x float64) string {
	switch {
	case x == 0:
		return "0"
	case math.Abs(x) >= 100:
		return fmt.Sprintf("%.0f", x)
	case math.Abs(x) >= 10:
		return fmt.Sprintf("%.1f", x)
	default:
		return fmt.Sprintf("%.2f", x)
	}
}

// count renders a median of counts: whole unless it fell between two runs.
func count(x float64) string {
	if x == math.Trunc(x) {
		return fmt.Sprintf("%.0f", x)
	}
	return fmt.Sprintf("%.1f", x)
}

func pct(x float64) string { return fmt.Sprintf("%.0f%%", 100*x) }

// pct1 keeps one decimal, for shares compared with a goal (97% of the reference).
func pct1(x float64) string { return fmt.Sprintf("%.1f%%", 100*x) }

func ratio(a, b float64) string {
	if b == 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.1f×", a/b)
}

// Markdown renders docs/benchmarks.md.
func Markdown(in Input) (string, error) {
	if in.Agents.DevicePluginNodes == 0 { // results from before grouping: one process per node
		in.Agents.DevicePluginNodes = in.Agents.DevicePlugins
	}
	rows := Summarize(in.Results)
	t, err := template.New("doc").Funcs(template.FuncMap{
		"num": num, "pct": pct, "pct1": pct1, "perNode": func(a Agents) float64 {
			if a.DevicePluginNodes == 0 {
				return 0
			}
			return a.DevicePluginRSSMiB / float64(a.DevicePluginNodes)
		}, "count": count, "gib": func(mib float64) string { return num(mib / 1024) }, "join": strings.Join,
		"gpu": func(r Row, s string) string {
			if !r.GPU {
				return "—"
			}
			return s
		},
	}).Parse(docTemplate)
	if err != nil {
		return "", err
	}
	var b bytes.Buffer
	err = t.Execute(&b, struct {
		Input
		Rows     []Row
		Headline []string
		Packing  []PackingRow
		Failures []runner.Result
		Retried  []runner.Result
		Costed   bool // sessions or a profile were read: the cost table applies
		Phased   bool // profiles were split into phases: the phase table applies
		// NoGPUPlugin: a no-gpu-plugin setup ran, to be described
		NoGPUPlugin bool
	}{in, rows, Headline(rows), PackingRows(in.Results, in.Reference, in.Load.Capacity), Failures(in.Results), Retried(in.Results), costed(rows), phased(rows),
		slices.ContainsFunc(in.Results, func(r runner.Result) bool { return r.Setup == NoGPUPlugin })})
	return b.String(), err
}
