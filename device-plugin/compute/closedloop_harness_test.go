package compute

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/volcano-vgpu/volcano-vgpu/api"
	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/containerdir"
)

// The closed loop on the fake driver (vcuda/fake), which models a real H100's
// NVML: device utilization ~10 samples/s, late and averaged over a longer
// window; per-process samples once a second, off by up to 20 points, keyed by
// host pids; GPU time per block that is the program's, not its launch shape's.
// Each tenant is an emulated container (its config, control file and shared
// dir) running the workload tool with libvcuda.so preloaded; the controller
// runs in this test process over go-nvml loading the fake libnvidia-ml.so.1,
// and maps the host pids of the processes it started to their tenants (the
// node's pid -> cgroup -> container resolver in production). A foreign
// process runs the workload without the preload and belongs to no tenant.
// Shares are the fake driver's own accounting of each process's GPU time
// (workload util_share).

// vcudaBuild is the limiter build the containers run (VCUDA_BUILD, default
// vcuda/_build; make ctest also runs the sanitizer builds). The controller's
// NVML always comes from the plain build: a sanitized library cannot be
// loaded into this process.
func vcudaBuild(t *testing.T) string {
	t.Helper()
	d := os.Getenv("VCUDA_BUILD")
	if d == "" {
		d = plainBuild
	}
	d, _ = filepath.Abs(d)
	for _, f := range []string{"libvcuda.so", "fake/libcuda.so.1", "fake/libnvidia-ml.so.1", "workload"} {
		if _, err := os.Stat(filepath.Join(d, f)); err != nil {
			t.Fatalf("limiter build missing %s: run make -C vcuda (make unit does): %v", f, err)
		}
	}
	return d
}

var plainBuild = filepath.Join("..", "..", "vcuda", "_build")

type fakeGPU struct {
	uuid, dir, build string
	env              []string
}

// The fake NVML reads its device list once per process, and NVML is
// process-wide: every scenario of this test binary runs on one fake GPU with
// one state dir, one after the other.
var shared struct {
	sync.Once
	gpu *fakeGPU
	lib nvml.Interface
	err error
}

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "vgpu-compute-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	uuid := fmt.Sprintf("GPU-%08x-0000-4000-8000-000000000001", os.Getpid())
	// Device samples on time (the fake's default) unless FAKEGPU_SAMPLE_DELAY_US
	// says otherwise: TestClosedLoopLateSamples runs part of the suite again in
	// a process of its own with them 200 ms late.
	shared.gpu = &fakeGPU{uuid: uuid, dir: dir,
		env: []string{"FAKEGPU_DEVICES=" + uuid + ":16384", "FAKEGPU_DIR=" + dir}}
	for _, kv := range shared.gpu.env {
		k, v, _ := strings.Cut(kv, "=")
		os.Setenv(k, v)
	}
	// The controller is the node: it sees host pids as they are.
	os.Setenv("FAKEGPU_NVML_PID_OFFSET", "0")
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// newFakeGPU returns the fake GPU with the controller's NVML loaded on it
// (go-nvml over the fake libnvidia-ml.so.1).
func newFakeGPU(t *testing.T) (*fakeGPU, *NVMLSource) {
	t.Helper()
	g := *shared.gpu
	g.build = vcudaBuild(t)
	shared.Do(func() {
		lib := nvml.New(nvml.WithLibraryPath(filepath.Join(plainBuild, "fake", "libnvidia-ml.so.1")))
		if ret := lib.Init(); ret != nvml.SUCCESS {
			shared.err = fmt.Errorf("fake NVML init: %v", ret)
			return
		}
		shared.lib = lib
	})
	if shared.err != nil {
		t.Fatal(shared.err)
	}
	return &g, &NVMLSource{Lib: shared.lib}
}

type tenantSpec struct {
	name      string
	container string // run in this tenant's container (a second process, or a restart); "" = its own
	cores     int    // 0: memory only (best effort)
	policy    api.ComputePolicy
	grid      int // blocks per kernel (fake: 1 µs per block unless nsPerBlock)
	block     int // threads per block: sets the cost estimate (blocks × warps) against the fake's time
	start     time.Duration
	secs      float64
	// the program: GPU ns per block (0: the fake's 1000), kernels per CUDA
	// graph launch (0: plain launches), KiB memset after each launch
	nsPerBlock, graph, memsetKiB int
	duty                         float64 // foreign: GPU busy fraction it holds itself to
	foreign                      bool    // no libvcuda, no container: foreign load
	rewind                       bool    // something in the container rewinds its launched counter every second
	queueUs                      int     // the GPU queues this much work before a launch blocks (0: the fake's 20 ms)
	// contexts time-slice: a slice of sliceUs, then the next context with
	// work, each switch switchUs of busy time no process owns (0: one FIFO
	// timeline). Every process of the GPU must say the same.
	sliceUs, switchUs int
	batch             int      // synchronize after every batch launches (0: never)
	env               []string // added to its processes' environment (FAKEGPU_POWER, FAKEGPU_MEMBOUND)
}

type tenantRun struct {
	spec    tenantSpec
	tenancy Tenancy
	cfg     string
	own     bool // first run of its container: listed to the controller
	share   float64
	err     error
}

// owners maps the host pids of the processes a scenario started to their
// tenants, as the node's resolver does by cgroup.
type owners struct {
	mu  sync.Mutex
	pid map[uint32]string
}

func (o *owners) set(pid int, key string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.pid[uint32(pid)] = key
}

func (o *owners) lookup(pid uint32) (string, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	k, ok := o.pid[pid]
	return k, ok
}

func (g *fakeGPU) tenant(t *testing.T, s tenantSpec) *tenantRun {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "c-"+s.name)
	shared := filepath.Join(dir, "shared")
	if err := os.MkdirAll(shared, 0o777); err != nil {
		t.Fatal(err)
	}
	cores := uint32(s.cores)
	if cores == 0 {
		cores = 100
	}
	policy := s.policy
	if policy == "" {
		policy = api.ComputeFixed
	}
	cfg := api.LimiterConfig{Policy: policy, PodUID: "uid-" + s.name, PodNamespace: "ns", PodName: s.name,
		ContainerName: "main", SharedDir: shared,
		Devices: []api.LimiterDevice{{UUID: g.uuid, MemoryLimitBytes: 1 << 30, CorePercent: cores}}}
	b, err := cfg.Encode()
	if err != nil {
		t.Fatal(err)
	}
	cfgPath := filepath.Join(dir, "vcuda.config")
	if err := os.WriteFile(cfgPath, b, 0o444); err != nil {
		t.Fatal(err)
	}
	ctl := filepath.Join(dir, api.ControlFile)
	if err := containerdir.CreateControl(ctl, 1); err != nil {
		t.Fatal(err)
	}
	share := float64(s.cores) / 100
	if s.cores == 0 {
		share = 1
	}
	return &tenantRun{spec: s, cfg: cfgPath, tenancy: Tenancy{
		Tenant: Tenant{Key: s.name, Share: share, Policy: policy}, UUID: g.uuid, Devices: 1,
		ControlPath: ctl, UsagePath: filepath.Join(shared, api.UsageFile)}}
}

func (g *fakeGPU) run(ctx context.Context, tr *tenantRun, own *owners) {
	s := tr.spec
	select {
	case <-time.After(s.start):
	case <-ctx.Done():
		tr.err = ctx.Err()
		return
	}
	args := []string{"--seconds", fmt.Sprint(s.secs), "--grid", fmt.Sprint(s.grid), "--block", fmt.Sprint(s.block),
		"--chunk-mib", "64", "--max-alloc-mib", "64"}
	for _, f := range []struct {
		flag string
		v    float64
	}{{"--ns-per-block", float64(s.nsPerBlock)}, {"--graph", float64(s.graph)}, {"--memset-kib", float64(s.memsetKiB)}, {"--duty", s.duty},
		{"--batch", float64(s.batch)}} {
		if f.v > 0 {
			args = append(args, f.flag, fmt.Sprint(f.v))
		}
	}
	cmd := exec.CommandContext(ctx, filepath.Join(g.build, "workload"), args...)
	cmd.Env = append(os.Environ(), g.env...)
	cmd.Env = append(cmd.Env, "LD_LIBRARY_PATH="+filepath.Join(g.build, "fake"), "ASAN_OPTIONS=verify_asan_link_order=0")
	if s.queueUs > 0 {
		cmd.Env = append(cmd.Env, fmt.Sprintf("FAKEGPU_MAX_QUEUE_US=%d", s.queueUs))
	}
	// always set: the fake GPU's state outlives the scenario, and a sliced
	// one left the GPU sliced for the scenarios after it (with late samples
	// the controller-dies case then missed: 27.4 + 54.8 for 30 + 60)
	cmd.Env = append(cmd.Env, fmt.Sprintf("FAKEGPU_SLICE_US=%d", s.sliceUs), fmt.Sprintf("FAKEGPU_SWITCH_US=%d", s.switchUs))
	cmd.Env = append(cmd.Env, s.env...)
	if !s.foreign {
		// Sanitizer builds: their runtime is loaded by the workload, after
		// the preload (as the C suite runs it).
		cmd.Env = append(cmd.Env, "LD_PRELOAD="+filepath.Join(g.build, "libvcuda.so"), "VCUDA_CONFIG="+tr.cfg)
	}
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Start()
	if err == nil {
		if !s.foreign {
			own.set(cmd.Process.Pid, tr.tenancy.Key)
		}
		if s.rewind {
			rctx, stop := context.WithCancel(ctx)
			go rewind(rctx, tr.tenancy.UsagePath)
			defer stop()
		}
		err = cmd.Wait()
	}
	out := stdout.String()
	if os.Getenv("VGPU_TRACE") != "" {
		fmt.Fprintf(os.Stderr, "%s stderr:\n%s", s.name, stderr.String())
	}
	if err != nil {
		tr.err = fmt.Errorf("%s: %v: %s%s", s.name, err, out, stderr.String())
		return
	}
	var res struct {
		OK    bool     `json:"ok"`
		Share *float64 `json:"util_share"`
		Error string   `json:"error"`
	}
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		if json.Unmarshal(sc.Bytes(), &res) == nil {
			break
		}
	}
	if !res.OK || res.Share == nil {
		tr.err = fmt.Errorf("%s: workload: %s (%s)", s.name, res.Error, out)
		return
	}
	tr.share = *res.Share * 100
}

// rewind rewinds a container's launched counter (device 0 of its usage
// report) by half, every second, while cmd runs: what a tenant that forges
// its report does.
func rewind(ctx context.Context, path string) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		b, err := os.ReadFile(path)
		if err != nil || api.CheckUsage(b, 1) != nil {
			continue
		}
		u := api.ReadUsage(b, 0)
		u.Launched /= 2
		api.WriteUsage(b, 0, u)
		f, err := os.OpenFile(path, os.O_WRONLY, 0)
		if err != nil {
			continue
		}
		_, _ = f.WriteAt(b, 0)
		f.Close()
	}
}

// outcome is what a scenario measured: each tenant's share (percent of the
// GPU, the fake driver's accounting), the foreign load the controller
// reported (percent, averaged over the second half of the run) and how often
// each tenant's counter was caught going backwards.
type outcome struct {
	shares  map[string]float64
	foreign float64
	rewinds map[string]uint64
}

// scenario runs the tenants on one fake GPU with the controller and returns
// their measured shares (percent of the GPU), by name.
func scenario(t *testing.T, specs []tenantSpec, stopControllerAfter time.Duration) map[string]float64 {
	t.Helper()
	return run(t, specs, stopControllerAfter).shares
}

func run(t *testing.T, specs []tenantSpec, stopControllerAfter time.Duration) outcome {
	t.Helper()
	specs, stopControllerAfter = stretched(t, specs, stopControllerAfter)
	g, src := newFakeGPU(t)
	runs := make([]*tenantRun, len(specs))
	byName := map[string]*tenantRun{}
	own := &owners{pid: map[uint32]string{}}
	var secs float64
	for i, s := range specs {
		secs = max(secs, s.start.Seconds()+s.secs)
		if s.foreign {
			runs[i] = &tenantRun{spec: s}
			continue
		}
		if c := byName[s.container]; c != nil {
			runs[i] = &tenantRun{spec: s, tenancy: c.tenancy, cfg: c.cfg}
			continue
		}
		runs[i] = g.tenant(t, s)
		runs[i].own = true
		byName[s.name] = runs[i]
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ctlCtx, stopCtl := context.WithCancel(ctx)
	defer stopCtl()
	r := &Runner{Source: src, Clock: Monotonic, Owners: own.lookup, List: func() ([]Tenancy, error) {
		var out []Tenancy
		for _, tr := range runs {
			if tr.own {
				out = append(out, tr.tenancy)
			}
		}
		return out, nil
	}}
	res := outcome{rewinds: map[string]uint64{}}
	var foreignSum float64
	var foreignN int
	start := time.Now()
	trace := os.Getenv("VGPU_TRACE") != ""
	r.Observe = func(o Observation) {
		if time.Since(start).Seconds() > secs/2 {
			foreignSum += o.Foreign
			foreignN++
		}
		for _, d := range o.Decisions {
			res.rewinds[d.Key] = max(res.rewinds[d.Key], d.Rewinds)
		}
		if trace {
			var b strings.Builder
			for _, d := range o.Decisions {
				fmt.Fprintf(&b, " %s[share %.3f meas %.3f cost %.4g cal %v units %.0f mode %d rate %.4g fb %.4g allow %d slot %v]", d.Key, d.Share, d.Measured, d.Cost, d.Calibrated, d.Units, d.Control.Mode, d.Control.Rate, d.Control.Fallback, d.Control.Allowance, d.Control.Slot)
			}
			t.Logf("busy %.3f foreign %.3f%s", o.Busy, o.Foreign, b.String())
		}
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = r.Run(ctlCtx) }()
	if stopControllerAfter > 0 {
		time.AfterFunc(stopControllerAfter, stopCtl)
	}
	var wg sync.WaitGroup
	for _, tr := range runs {
		wg.Add(1)
		go func() { defer wg.Done(); g.run(ctx, tr, own) }()
	}
	wg.Wait()
	stopCtl()
	<-done
	res.shares = map[string]float64{}
	for _, tr := range runs {
		if tr.err != nil {
			t.Fatal(tr.err)
		}
		res.shares[tr.spec.name] = tr.share
	}
	if foreignN > 0 {
		res.foreign = 100 * foreignSum / float64(foreignN)
	}
	return res
}

// attempts: real time on a shared 2-core machine; a launcher starved of CPU
// idles its GPU whatever the controller does. A scenario that misses is run
// again (each miss logged with the load average), up to attempts in all; the
// last result counts. The C suite does the same.
const attempts = 3

func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	return strings.Fields(string(b))[0]
}

// retry runs measure until ok or out of attempts and returns the last result.
func retry[T any](t *testing.T, measure func() T, ok func(T) bool) T {
	t.Helper()
	for i := 1; ; i++ {
		got := measure()
		if ok(got) || i == attempts {
			return got
		}
		t.Logf("missed on attempt %d (%v; load average %s): measuring again", i, got, loadAverage())
	}
}

func near(got, want map[string]float64, tol float64) bool {
	for name, w := range want {
		if math.Abs(got[name]-w) > tol {
			return false
		}
	}
	return true
}

// within checks every tenant's share against its target ± tol points.
func within(t *testing.T, got, want map[string]float64, tol float64) {
	t.Helper()
	var parts []string
	for name, w := range want {
		parts = append(parts, fmt.Sprintf("%s %.1f (want %.0f)", name, got[name], w))
	}
	t.Logf("fake driver: %s", strings.Join(parts, ", "))
	if !near(got, want, tol) {
		t.Errorf("a tenant is more than %.0f points off its target: %s", tol, strings.Join(parts, ", "))
	}
}

// deep: the GPU queues half a second of the tenant's work before its launch
// blocks (the fake's default is 20 ms).
func deep(s tenantSpec) tenantSpec {
	s.queueUs = 500000
	return s
}

// sliced: the GPU time-slices its contexts, 2 ms each, a switch costing
// 40 µs: two saturating tenants then get 49 + 49% of solo, as two on a real
// H100 did (REALGPU.md).
func sliced(s tenantSpec) tenantSpec {
	s.sliceUs, s.switchUs = 2000, 40
	return s
}

// short: 200 µs kernels (200 blocks) instead of 2 ms.
func short(s tenantSpec) tenantSpec {
	s.grid = 200
	return s
}

func compute(name string, cores int) tenantSpec {
	return tenantSpec{name: name, cores: cores, grid: 2000, block: 256, secs: 6}
}

func (s tenantSpec) at(start time.Duration, secs float64) tenantSpec {
	s.start, s.secs = start, secs
	return s
}

func (s tenantSpec) in(container, name string) tenantSpec {
	s.container, s.name = container, name
	return s
}
