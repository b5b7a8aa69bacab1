// Command vgpu-bench runs the end-to-end benchmark (make bench-e2e): the
// same simulated cluster and seeded trace with our vgpu plugin, Volcano's
// deviceshare and no GPU plugin, then writes docs/benchmarks.md and its
// chart. See docs/benchmarks.md for what it measures.
//
//	vgpu-bench [flags]                       run the benchmark
//	vgpu-bench nsexec -dir D -- CMD ARGS…    (internal) run CMD with D's in-cluster credentials in a private mount namespace
//	vgpu-bench nscheck                       (internal) check the credentials are visible
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/klog/v2"
	vcclient "volcano.sh/apis/pkg/client/clientset/versioned"

	"github.com/volcano-vgpu/volcano-vgpu/api"
	"github.com/volcano-vgpu/volcano-vgpu/e2e/bench/incluster"
	"github.com/volcano-vgpu/volcano-vgpu/e2e/bench/procstat"
	"github.com/volcano-vgpu/volcano-vgpu/e2e/bench/report"
	"github.com/volcano-vgpu/volcano-vgpu/e2e/bench/runner"
	"github.com/volcano-vgpu/volcano-vgpu/e2e/cluster"
)

// defaultGroup hosts 200 simulated nodes' device plugins per process: on a
// 2-core machine, 200 processes (one per node) starve the control plane
// during a creation burst (webhook timeouts, reset streams), while 200
// nodes in one process held 0.33 GiB (docs/benchmarks-1000.md).
const defaultGroup = 200

type flags struct {
	runs     int
	seed     uint64
	timeout  time.Duration
	stall    time.Duration
	setups   string
	workers  int
	keep     bool
	doc      string
	chart    string
	command  string
	noreport bool
	from     string
	results  string
	note     string
	load     float64
	group    int
	ref      bool
	qps      float64
	profile  time.Duration
	backlog  bool
	// nodesToFind: vc-scheduler's --percentage-nodes-to-find (0: not set)
	nodesToFind int
}

func main() {
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case "nsexec":
			fs := flag.NewFlagSet("nsexec", flag.ExitOnError)
			dir := fs.String("dir", "", "directory holding token and ca.crt")
			_ = fs.Parse(os.Args[2:])
			err := incluster.Exec(*dir, fs.Args())
			fmt.Fprintln(os.Stderr, "vgpu-bench nsexec:", err)
			os.Exit(1)
		case "nscheck":
			if err := incluster.Check(); err != nil {
				fmt.Fprintln(os.Stderr, "vgpu-bench nscheck:", err)
				os.Exit(1)
			}
			return
		}
	}
	var f flags
	klog.InitFlags(nil)
	flag.IntVar(&f.runs, "runs", 3, "runs per setup (the table shows medians)")
	flag.Uint64Var(&f.seed, "seed", 1, "trace seed")
	flag.DurationVar(&f.timeout, "timeout", 2*time.Minute, "stop waiting for binds this long after creation")
	flag.DurationVar(&f.stall, "stall", time.Minute, "stop waiting after this long without a new bind")
	flag.StringVar(&f.setups, "setups", "vgpu,deviceshare,cpu-only", "setups to run, in this order each round (also "+report.NoGPUPlugin+": vgpu's pods, GPU requests included, with the cpu-only configuration)")
	flag.IntVar(&f.workers, "workers", 8, "concurrent creators")
	flag.Float64Var(&f.qps, "qps", 200, "creates per second, all creators together, retries included (0: as fast as the workers go)")
	flag.DurationVar(&f.profile, "profile", 0, "take a CPU profile of vc-scheduler for this long from the first pod create of every run (pprof, under _output/bench/profiles)")
	flag.BoolVar(&f.backlog, "backlog", false, "create every pod while the default queue holds them (capability: one millicore of CPU), release them with one queue update once vc-scheduler has them all in cache, and time binding from the release (the scheduler's cost apart from the creation rate)")
	flag.BoolVar(&f.keep, "keep", false, "leave the cluster running")
	flag.StringVar(&f.doc, "doc", "docs/benchmarks.md", "report to write (relative to the repository)")
	flag.StringVar(&f.chart, "chart", "docs/benchmarks.png", "chart to write (relative to the repository)")
	flag.StringVar(&f.command, "command", "make bench-e2e", "the command shown in the report")
	flag.BoolVar(&f.noreport, "no-report", false, "write only the raw results (-results)")
	flag.StringVar(&f.results, "results", "_output/bench/results.json", "raw results to write (relative to the repository)")
	flag.StringVar(&f.note, "note", "", "a paragraph added to the report's deviceshare section")
	flag.StringVar(&f.from, "from", "", "render the report from this results.json instead of running")
	flag.Float64Var(&f.load, "load", 0, "scale the trace until it asks this share of the cluster's GPU memory and GPUs (1.3: oversubscribed by 30%); 0 keeps the fixed default mix")
	flag.IntVar(&f.group, "group", defaultGroup, "nodes per simulated device plugin process (0: "+cluster.EnvDevicePluginGroup+" or one process per node)")
	flag.IntVar(&f.nodesToFind, "percentage-nodes-to-find", 0, "vc-scheduler's --percentage-nodes-to-find: the share of nodes (1-100) whose feasible ones it scores per task; 0 keeps Volcano's adaptive default (50% less 1 point per 125 nodes, at least 5% and 100 nodes)")
	flag.BoolVar(&f.ref, "reference", true, "pack the trace offline too (e2e/bench/reference) and compare")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx = klog.NewContext(ctx, klog.Background())
	if err := run(ctx, f); err != nil {
		fmt.Fprintln(os.Stderr, "vgpu-bench:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, f flags) (err error) {
	logger := klog.FromContext(ctx)
	wd, err := os.Getwd()
	if err != nil {
		return err
	}
	root, err := cluster.FindRoot(wd)
	if err != nil {
		return err
	}
	if os.Getenv(cluster.EnvSimFile) == "" {
		_ = os.Setenv(cluster.EnvSimFile, filepath.Join(root, "e2e", "sim", "clusters", "bench.yaml"))
	}
	cfg, err := cluster.DefaultConfig(root)
	if err != nil {
		return err
	}
	cfg.DevicePluginHAMi = true
	cfg.NoDevicePluginMetrics = true // never read here; a thousand nodes would take a thousand ports
	cfg.SchedulerPprof = f.profile > 0
	if f.nodesToFind < 0 || f.nodesToFind > 100 {
		return fmt.Errorf("-percentage-nodes-to-find %d: expected 1 to 100, or 0 for Volcano's adaptive default", f.nodesToFind)
	}
	if f.nodesToFind > 0 {
		cfg.SchedulerArgs = []string{fmt.Sprintf("--percentage-nodes-to-find=%d", f.nodesToFind)}
	}
	if f.group > 0 {
		cfg.DevicePluginGroup = f.group
	}
	if f.from != "" {
		data, err := os.ReadFile(f.from)
		if err != nil {
			return err
		}
		var in report.Input
		if err := json.Unmarshal(data, &in); err != nil {
			return fmt.Errorf("%s: %w", f.from, err)
		}
		if in.Workers == 0 { // results written before the field existed
			in.Workers = f.workers
		}
		if in.RawFile == "" { // results written before the field existed
			in.RawFile = f.from
		}
		for i := range in.Results { // profiles read before their phases were
			r := &in.Results[i]
			if r.Profile == "" || r.ProfileShares[runner.PartSeconds] > 0 {
				continue
			}
			if _, parts, perr := runner.ProfileShares(r.Profile); perr == nil {
				r.ProfileShares = parts
			} else {
				logger.Info("Profile phases left out", "setup", r.Setup, "run", r.Run, "err", perr)
			}
		}
		if f.note != "" {
			in.Note = f.note
		}
		return writeReport(root, f, in)
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	if filepath.Dir(self) != cfg.BinDir {
		return fmt.Errorf("run the vgpu-bench built into %s (make bench-e2e): the scheduler is started through it", cfg.BinDir)
	}
	setups, err := chooseSetups(root, f.setups)
	if err != nil {
		return err
	}
	began := time.Now()
	simFile, _ := filepath.Rel(root, cfg.SimFile)
	in := report.Input{Command: f.command, Date: time.Now().UTC().Format("2006-01-02"), Machine: machine(), Seed: f.seed,
		Note: f.note, Backlog: f.backlog, Runs: f.runs, Workers: f.workers, QPS: f.qps, Timeout: f.timeout.String(), Stall: f.stall.String(), ChartPNG: filepath.Base(f.chart),
		SimFile: simFile, RawFile: f.results}

	cl, err := cluster.Up(ctx, cfg)
	if err != nil {
		return err
	}
	defer func() {
		saveLogs(cfg, filepath.Join(root, "_output", "bench", "logs"))
		if f.keep {
			return
		}
		if derr := cluster.Down(context.WithoutCancel(ctx), cfg); derr != nil {
			err = errors.Join(err, derr)
		}
	}()
	in.Cluster = describeCluster(cl)
	inventories, err := runner.Inventories(ctx, cl.Client)
	if err != nil {
		return err
	}
	jobs, err := makeTrace(f, inventories, &in)
	if err != nil {
		return err
	}
	if f.ref {
		if in.Reference, err = packReference(ctx, jobs, inventories); err != nil {
			return err
		}
	}
	if err := checkHAMi(ctx, cl); err != nil {
		return err
	}

	// deviceshare's in-cluster credentials, for the scheduler process only.
	saDir := filepath.Join(cfg.StateDir, "incluster", "serviceaccount")
	if err := incluster.Write(saDir, cfg.AdminTokenFile(), cfg.ServingCAFile()); err != nil {
		return err
	}
	cl.Config.SchedulerEnv = incluster.Env("127.0.0.1", cfg.Ports.APIServer)
	if out, perr := exec.CommandContext(ctx, self, "nsexec", "-dir", saDir, "--", self, "nscheck").CombinedOutput(); perr == nil {
		cl.Config.SchedulerWrapper = []string{self, "nsexec", "-dir", saDir, "--"}
		in.Sandbox = "sees the admin token and the apiserver's CA at `" + incluster.ServiceAccountDir +
			"` in a private mount namespace of its own process (overlay), so nothing is written to that path on the machine."
	} else {
		logger.Info("No private mount namespace: writing the credentials to the machine for this run", "reason", strings.TrimSpace(string(out)))
		undo, ierr := incluster.Install(saDir)
		if ierr != nil {
			return fmt.Errorf("in-cluster credentials: no mount namespace (%v) and %w", perr, ierr)
		}
		defer func() { err = errors.Join(err, undo()) }()
		in.Sandbox = "the admin token and the apiserver's CA written to `" + incluster.ServiceAccountDir +
			"` for the run (mount namespaces were not permitted) and removed afterwards."
	}
	defer func() {
		// Leave a kept cluster with its usual scheduler.
		cl.Config.SchedulerConf = cfg.SchedulerConf
		cl.Config.SchedulerWrapper, cl.Config.SchedulerEnv = nil, nil
		if f.keep {
			err = errors.Join(err, cl.RestartScheduler(context.WithoutCancel(ctx)))
		}
	}()

	fast := rest.CopyConfig(cl.RestConfig)
	fast.QPS, fast.Burst = 2000, 4000
	kube, err := kubernetes.NewForConfig(fast)
	if err != nil {
		return err
	}
	vc, err := vcclient.NewForConfig(fast)
	if err != nil {
		return err
	}
	opts := runner.Options{Cluster: cl, Kube: kube, VC: vc, Jobs: jobs, Tag: strconv.FormatInt(time.Now().Unix()%100000, 10), Workers: f.workers, Timeout: f.timeout, Stall: f.stall, Backlog: f.backlog}
	if f.qps > 0 {
		opts.Pace = flowcontrol.NewTokenBucketRateLimiter(float32(f.qps), max(f.workers, 1))
	}
	if f.profile > 0 {
		opts.Profile, opts.ProfileDir = f.profile, filepath.Join(root, "_output", "bench", "profiles")
	}
	results := f.results
	if !filepath.IsAbs(results) {
		results = filepath.Join(root, results)
	}
	if err := os.MkdirAll(filepath.Dir(results), 0o755); err != nil {
		return err
	}
	var failed []string
	for n := 1; n <= f.runs; n++ {
		for _, s := range setups {
			logger.Info("Run", "setup", s.Name, "run", n, "of", f.runs)
			res, err := runner.Run(ctx, opts, s, n)
			if err != nil {
				if ctx.Err() != nil { // interrupted: nothing more to measure
					return fmt.Errorf("%s run %d: %w", s.Name, n, err)
				}
				// The run is reported as failed, with its reason, and the
				// benchmark goes on with the next one.
				res.Failed = err.Error()
				failed = append(failed, fmt.Sprintf("%s run %d: %v", s.Name, n, err))
				logger.Error(err, "Run failed", "setup", s.Name, "run", n, "retried", res.RetryReasons)
			}
			in.Results = append(in.Results, res)
			if err := writeJSON(results, in); err != nil {
				return err
			}
		}
	}
	in.Agents = agents(cfg, cl)
	if err := runner.Cleanup(ctx, opts); err != nil {
		return err
	}
	in.Machine.LoadAfter = loadAvg()
	in.Minutes = time.Since(began).Minutes() // the cluster's stop (a few seconds) is not counted
	if err := writeJSON(results, in); err != nil {
		return err
	}
	for _, l := range report.Headline(report.Summarize(in.Results)) {
		fmt.Println(l)
	}
	if !f.noreport {
		if err := writeReport(root, f, in); err != nil {
			return err
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("%d of %d runs failed (reported in %s): %s", len(failed), len(in.Results), f.results, strings.Join(failed, "; "))
	}
	return nil
}

func chooseSetups(root, list string) ([]runner.Setup, error) {
	conf := func(name string) string { return filepath.Join(root, "config", "scheduler", name) }
	all := map[string]runner.Setup{
		report.VGPU:        {Name: report.VGPU, SchedulerConf: conf("volcano-scheduler.conf"), GPU: true, Placement: runner.VGPUPlacement},
		report.Deviceshare: {Name: report.Deviceshare, SchedulerConf: conf("deviceshare.conf"), GPU: true, Placement: runner.DevicesharePlacement},
		report.CPUOnly:     {Name: report.CPUOnly, SchedulerConf: conf("cpu-only.conf")},
		report.NoGPUPlugin: {Name: report.NoGPUPlugin, SchedulerConf: conf("cpu-only.conf"), GPU: true},
	}
	var out []runner.Setup
	for _, name := range strings.Split(list, ",") {
		s, ok := all[strings.TrimSpace(name)]
		if !ok {
			return nil, fmt.Errorf("-setups: unknown setup %q: expected %s, %s, %s or %s", name, report.VGPU, report.Deviceshare, report.CPUOnly, report.NoGPUPlugin)
		}
		out = append(out, s)
	}
	return out, nil
}

// checkHAMi fails when a reused cluster's device plugins do not publish
// deviceshare's annotation (started without report.hami).
func checkHAMi(ctx context.Context, cl *cluster.Cluster) error {
	n, err := cl.Client.CoreV1().Nodes().Get(ctx, cl.Nodes[0].Name, metav1GetOptions)
	if err != nil {
		return err
	}
	if _, ok := n.Annotations[api.HAMiRegisterKey]; !ok {
		return fmt.Errorf("node %s has no %s: the cluster at %s runs without report.hami; stop it (localcluster down with the same %s) and rerun",
			n.Name, api.HAMiRegisterKey, cl.Config.StateDir, cluster.EnvPortBase)
	}
	return nil
}

func describeCluster(cl *cluster.Cluster) string {
	models := map[string]int{}
	var order []string
	gpus := 0
	for _, n := range cl.Nodes {
		m := n.GPUs[0].Model
		if models[m] == 0 {
			order = append(order, m)
		}
		models[m]++
		gpus += len(n.GPUs)
	}
	var parts []string
	for _, m := range order {
		parts = append(parts, fmt.Sprintf("%d × %s", models[m], m))
	}
	return fmt.Sprintf("%d nodes, %d GPUs (%s nodes of 8 GPUs)", len(cl.Nodes), gpus, strings.Join(parts, ", "))
}

// agents sums the node agents' resident memory.
func agents(cfg cluster.Config, cl *cluster.Cluster) report.Agents {
	var a report.Agents
	var names []string
	for _, n := range cl.Nodes {
		names = append(names, n.Name)
	}
	hosted := map[string]int{}
	for _, h := range cfg.PluginHosts(names) {
		hosted[h.Name] = len(h.Nodes)
	}
	for _, name := range cfg.PidNames() {
		pid, alive := cfg.Pid(name)
		if !alive {
			continue
		}
		s, err := procstat.Read(pid)
		if err != nil {
			continue
		}
		switch {
		case strings.HasPrefix(name, cluster.DevicePluginName("")):
			a.DevicePlugins++
			a.DevicePluginNodes += hosted[name]
			a.DevicePluginRSSMiB += float64(s.RSSKiB) / 1024
		case strings.HasPrefix(name, cluster.EmulatorName): // one, or several where the open-file limit needs them
			a.EmulatorRSSMiB += float64(s.RSSKiB) / 1024
		}
	}
	return a
}

// saveLogs copies the control plane's logs out of the cluster state, which
// Down removes.
func saveLogs(cfg cluster.Config, dir string) {
	_ = os.MkdirAll(dir, 0o755)
	for _, name := range []string{cluster.SchedulerName, "kube-apiserver", "vc-controller-manager", cluster.EmulatorName} {
		if data, err := os.ReadFile(filepath.Join(cfg.StateDir, "logs", name+".log")); err == nil {
			_ = os.WriteFile(filepath.Join(dir, name+".log"), data, 0o644)
		}
	}
}

func writeJSON(path string, v any) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(data, '\n'), 0o644)
}

func writeReport(root string, f flags, in report.Input) error {
	doc, err := report.Markdown(in)
	if err != nil {
		return err
	}
	png, err := report.Chart(report.Summarize(in.Results))
	if err != nil {
		return err
	}
	abs := func(p string) string {
		if filepath.IsAbs(p) {
			return p
		}
		return filepath.Join(root, p)
	}
	for _, p := range []string{abs(f.doc), abs(f.chart)} {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
	}
	if err := os.WriteFile(abs(f.doc), []byte(doc), 0o644); err != nil {
		return err
	}
	return os.WriteFile(abs(f.chart), png, 0o644)
}
