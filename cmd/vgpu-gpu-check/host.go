package main

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/volcano-vgpu/volcano-vgpu/api"
	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/compute"
	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/containerdir"
)

// host runs tenants the way a node does.
type host struct {
	lib, work, uuid string
	nvml            nvml.Interface
	dev             nvml.Device
	n               int  // tenants made so far
	unconfined      bool // the controller's Runner.Unconfined (-unconfined)
}

// prepare makes sure the paths tenants bind over exist (an empty
// /etc/ld.so.preload changes nothing for the host's processes).
func (h *host) prepare() error {
	if _, err := os.Stat(api.LdPreloadPath); os.IsNotExist(err) {
		if err := os.WriteFile(api.LdPreloadPath, nil, 0o644); err != nil {
			return fmt.Errorf("create an empty %s to bind over: %w", api.LdPreloadPath, err)
		}
	}
	return os.MkdirAll(filepath.Dir(api.LimiterConfigPath), 0o755)
}

type tenant struct {
	etc, shared, preload string
	tenancy              compute.Tenancy
	mpsPipe              string   // the MPS pipe directory the tenant sees read-only at api.MPSPipeDir ("" none)
	said                 []string // what libvcuda said on the tenant's stderr (limiterLines), each once
}

func (h *host) tenant(policy api.ComputePolicy, cores uint32, capMiB uint64) (*tenant, error) {
	return h.tenantWith(policy, cores, capMiB, 0)
}

// tenantWith is a tenant whose limiter config also carries an MPS
// active-thread percentage (0: time-sliced).
func (h *host) tenantWith(policy api.ComputePolicy, cores uint32, capMiB uint64, mpsThreads uint32) (*tenant, error) {
	h.n++
	dir := filepath.Join(h.work, fmt.Sprintf("t%d", h.n))
	t := &tenant{etc: filepath.Join(dir, "etc"), shared: filepath.Join(dir, "shared"), preload: filepath.Join(dir, "ld.so.preload")}
	for _, d := range []string{t.etc, t.shared} {
		if err := os.MkdirAll(d, 0o777); err != nil {
			return nil, err
		}
	}
	if err := os.WriteFile(t.preload, []byte(h.lib+"\n"), 0o644); err != nil {
		return nil, err
	}
	cfg := api.LimiterConfig{Policy: policy, PodUID: fmt.Sprintf("gpu-check-%d", h.n), PodNamespace: "gpu-check",
		PodName: fmt.Sprintf("t%d", h.n), ContainerName: "main", SharedDir: t.shared, MPSThreadPercent: mpsThreads,
		Devices: []api.LimiterDevice{{UUID: h.uuid, MemoryLimitBytes: capMiB << 20, CorePercent: cores}}}
	b, err := cfg.Encode()
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(t.etc, filepath.Base(api.LimiterConfigPath)), b, 0o444); err != nil {
		return nil, err
	}
	ctl := filepath.Join(t.etc, api.ControlFile)
	if err := containerdir.CreateControl(ctl, 1); err != nil {
		return nil, err
	}
	share := float64(cores) / 100
	t.tenancy = compute.Tenancy{Tenant: compute.Tenant{Key: cfg.PodUID, Share: share, Policy: policy},
		UUID: h.uuid, Devices: 1, ControlPath: ctl, UsagePath: filepath.Join(t.shared, api.UsageFile)}
	return t, nil
}

// exec runs cmd in t's own pid and mount namespaces with the production paths
// bound in (t.mpsPipe read-only at api.MPSPipeDir, where libvcuda points
// CUDA_MPS_PIPE_DIRECTORY), as in a container, and decodes its JSON line into
// out. started,
// when set, gets the host pid of the namespace's parent (unshare). The whole
// namespace dies with ctx: unshare is killed, its child (pid 1 there) gets
// SIGKILL from --kill-child, and the kernel ends the rest.
func (h *host) exec(ctx context.Context, t *tenant, cmdline, env []string, out any, started func(pid int), args ...string) error {
	script := `mount --bind "$1" /etc/ld.so.preload && mount --bind "$2" /etc/vcuda && ` +
		`{ [ -z "$3" ] || { mount --bind "$3" "$4" && mount -o remount,bind,ro "$4"; }; } && shift 4 && exec "$@"`
	argv := append([]string{"-m", "-p", "-f", "--kill-child", "--mount-proc", "sh", "-c", script, "sh", t.preload, t.etc, t.mpsPipe, api.MPSPipeDir}, cmdline...)
	argv = append(argv, args...)
	cmd := exec.CommandContext(ctx, "unshare", argv...)
	cmd.Env = append(os.Environ(), env...)
	cmd.WaitDelay = 5 * time.Second
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // the check killed: its tenants too
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("unshare (util-linux) for the tenant's namespaces: %w", err)
	}
	if started != nil {
		started(cmd.Process.Pid)
	}
	err := cmd.Wait()
	for _, l := range limiterLines(stderr.String()) {
		if !slices.Contains(t.said, l) {
			t.said = append(t.said, l)
		}
	}
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("%v: %s", err, lastLine(stderr.String()))
	}
	if err := decodeJSONLine(stdout.Bytes(), out); err != nil {
		return fmt.Errorf("%v (stderr: %s)", err, lastLine(stderr.String()))
	}
	return nil
}

// memory allocates 1 GiB chunks on one path under capMiB, never more than the
// card holds, and returns what was granted and whether a chunk was refused.
func (h *host) memory(ctx context.Context, p *program, path string, capMiB uint64, secs float64) (uint64, bool, error) {
	mem, ret := h.dev.GetMemoryInfo()
	if ret != nvml.SUCCESS {
		return 0, false, fmt.Errorf("NVML memory info: %v", ret)
	}
	chunks, err := memBound(capMiB, mem.Free>>20)
	if err != nil {
		return 0, false, err
	}
	t, err := h.tenant(api.ComputeNone, 100, capMiB)
	if err != nil {
		return 0, false, err
	}
	var r struct {
		Allocated uint64 `json:"allocated_mib"`
		Refused   bool
	}
	err = h.exec(ctx, t, p.cmd, p.env[path], &r, nil, "mem", path, fmt.Sprint(chunks), fmt.Sprint(secs))
	return r.Allocated, r.Refused, err
}

// solo is a workload's rate alone with the limiter loaded and no compute
// limit, and what the device did meanwhile (devSampler).
func (h *host) solo(ctx context.Context, p *program, work string, secs float64) (float64, *devSampler, error) {
	t, err := h.tenant(api.ComputeNone, 100, 1<<20)
	if err != nil {
		return 0, nil, err
	}
	line, err := newStartLine(h.work, 1)
	if err != nil {
		return 0, nil, err
	}
	defer line.remove()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	dev, ddone := h.sampleDevice(ctx, line, secs)
	exited := make(chan struct{})
	go func() { line.watch(ctx, exited) }()
	var r struct{ Rate float64 }
	err = h.exec(ctx, t, p.cmd, line.env(0), &r, nil, workArgs(work, secs)...)
	close(exited)
	cancel()
	<-ddone
	if err != nil {
		return 0, dev, err
	}
	if r.Rate <= 0 {
		return 0, dev, fmt.Errorf("%s ran at rate %g alone", work, r.Rate)
	}
	return r.Rate, dev, nil
}

// sampleDevice reads the device (devSampler) from the midpoint of the
// tenants' timed loops until ctx ends; done closes then.
func (h *host) sampleDevice(ctx context.Context, line *startLine, secs float64) (*devSampler, <-chan struct{}) {
	s := newDevSampler(h.nvml, h.dev)
	done := make(chan struct{})
	go func() {
		defer close(done)
		line.after(ctx, func() { s.run(ctx, time.Duration(secs/2*float64(time.Second))) })
	}()
	return s, done
}

// newRunner is the node's compute controller on the real NVML, as the device
// plugin runs it: the check's only use of compute.Runner. owners maps the
// tenants' host pids to their keys (the node does it through cgroups), so the
// controller calibrates each tenant's cost from NVML's per-process samples;
// unconfined is limiter.confineSlots: false.
func newRunner(lib nvml.Interface, list func() ([]compute.Tenancy, error), owners func() map[int]string, unconfined bool) *compute.Runner {
	return &compute.Runner{Source: &compute.NVMLSource{Lib: lib}, Clock: compute.Monotonic, List: list, Unconfined: unconfined,
		Owners: func(pid uint32) (string, bool) {
			key, ok := owners()[int(pid)]
			return key, ok
		}}
}

// shares runs one tenant per spec together under the node controller and
// returns each one's rate as a percentage of its workload's solo rate, the
// row's note (what NVML's per-process samples said of each, mapped by host
// pid, what the device did meanwhile) and the GPU time over the second half
// (result.GPUTime; nil without device readings). trace (nil: none) opens the
// row's period trace.
func (h *host) shares(ctx context.Context, progs map[string]*program, ts []tenantSpec, secs float64, solo map[string]float64,
	trace func(keys []string) (*periodTrace, error)) ([]float64, string, []float64, error) {
	tens := make([]*tenant, len(ts))
	for i, s := range ts {
		if _, ok := solo[s.Work]; !ok {
			return nil, "", nil, fmt.Errorf("no solo rate of %s: its solo row did not finish", s.Work)
		}
		policy, cores := api.ComputeFixed, uint32(s.Cores)
		switch {
		case s.Unlimited:
			policy, cores = api.ComputeNone, 100 // as the solo rows run
		case s.Balance:
			policy = api.ComputeBalance
		}
		t, err := h.tenant(policy, cores, 1<<20)
		if err != nil {
			return nil, "", nil, err
		}
		tens[i] = t
	}
	line, err := newStartLine(h.work, len(ts))
	if err != nil {
		return nil, "", nil, err
	}
	defer line.remove()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	roots := &rootSet{m: map[int]string{}}
	owners := func() map[int]string {
		o, err := ownersOf("/proc", roots.snapshot())
		if err != nil {
			return nil
		}
		return o
	}
	r := newRunner(h.nvml, func() ([]compute.Tenancy, error) {
		out := make([]compute.Tenancy, len(tens))
		for i, t := range tens {
			out[i] = t.tenancy
		}
		return out, nil
	}, owners, h.unconfined)
	keys := make([]string, len(tens))
	for i, t := range tens {
		keys[i] = t.tenancy.Key
	}
	var tr *periodTrace
	if trace != nil {
		if tr, err = trace(keys); err != nil {
			return nil, "", nil, err
		}
	}
	var lags []time.Duration // read once Run has returned
	fitted := 0
	attr := &attribution{}
	r.Observe = func(o compute.Observation) {
		lags = append(lags, o.Lag)
		if o.Fitted {
			fitted++
		}
		attr.add(o, time.Now())
		tr.observe(o)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = r.Run(ctx) }()
	sampler := newPidSampler(h.dev, owners)
	sdone := make(chan struct{})
	go func() {
		defer close(sdone)
		line.after(ctx, func() {
			half := time.Duration(secs / 2 * float64(time.Second))
			now := time.Now()
			attr.arm(now.Add(half), now.Add(2*half))
			sampler.run(ctx, half)
		})
	}()
	dev, ddone := h.sampleDevice(ctx, line, secs)
	got, err := h.runTogether(ctx, progs, ts, secs, solo, line, func(i int) (*tenant, []string, func(int)) {
		t := tens[i]
		return t, nil, func(pid int) { roots.add(pid, t.tenancy.Key) }
	})
	cancel()
	<-done
	<-sdone
	<-ddone
	notes := []string{}
	if err := tr.close(); err != nil {
		notes = append(notes, err.Error())
	}
	gpuTime, split := rowGPUTime(ts, got, attr, dev)
	if split {
		notes = append(notes, gpuTimeNote(gpuTime))
	}
	held := keys // the tenants the controller held to a target: an unlimited one's attribution says nothing
	for _, s := range ts {
		if s.Unlimited {
			held = nil
		}
	}
	for _, n := range []string{line.note(), dev.summary(), sampler.summary(keys), attr.note(held), lagSummary(lags), fitSummary(fitted, len(lags)), saidSummary(tens)} {
		if n != "" {
			notes = append(notes, n)
		}
	}
	return got, strings.Join(notes, "; "), gpuTime, err
}

// limiterLines are the lines libvcuda wrote to a tenant's stderr (it says
// each kind of thing once a process: a control file it could not read, a
// queue bound turned off by a failing event call).
func limiterLines(stderr string) []string {
	var out []string
	for _, l := range strings.Split(stderr, "\n") {
		if l = strings.TrimSpace(l); strings.HasPrefix(l, "vcuda: ") {
			out = append(out, l)
		}
	}
	return out
}

// saidSummary is what libvcuda said in a row's tenants, each line once, with
// the tenants that said it: "" where it said nothing.
func saidSummary(ts []*tenant) string {
	var lines []string
	who := map[string][]string{}
	for i, t := range ts {
		for _, l := range t.said {
			if who[l] == nil {
				lines = append(lines, l)
			}
			who[l] = append(who[l], fmt.Sprintf("t%d", i+1))
		}
	}
	for i, l := range lines {
		lines[i] = fmt.Sprintf("%s (%s)", l, strings.Join(who[l], ", "))
	}
	return strings.Join(lines, "; ")
}

// lagSummary says how late the controller read the device's utilization
// samples in a row (the fakes model 0-300 ms; a real driver's is what this
// measures): the median and the largest, "" without any.
func lagSummary(lags []time.Duration) string {
	if len(lags) == 0 {
		return ""
	}
	s := slices.Clone(lags)
	slices.Sort(s)
	return fmt.Sprintf("device samples read %d ms late (median of %d; max %d)",
		s[len(s)/2].Milliseconds(), len(s), s[len(s)-1].Milliseconds())
}

// fitSummary says in how many of a row's control periods the containers'
// costs came from the fit over their turns (a GPU whose per-process samples
// give no shares, with programs whose costs differ; docs/limiter.md): ""
// in none.
func fitSummary(fitted, periods int) string {
	if fitted == 0 || periods == 0 {
		return ""
	}
	return fmt.Sprintf("costs fitted from the containers' turns in %d of %d periods", fitted, periods)
}

// runTogether runs every tenant's workload at once (tenant i's container,
// extra environment and start hook from each), their timed loops from the
// start line, and returns each one's rate as a percentage of its workload's
// solo rate; the error names the first tenant that failed.
func (h *host) runTogether(ctx context.Context, progs map[string]*program, ts []tenantSpec, secs float64, solo map[string]float64,
	line *startLine, each func(i int) (*tenant, []string, func(pid int))) ([]float64, error) {
	got := make([]float64, len(ts))
	type setup struct {
		t       *tenant
		env     []string
		started func(pid int)
	}
	su := make([]setup, len(ts))
	for i := range ts {
		su[i].t, su[i].env, su[i].started = each(i)
	}
	errs := line.together(ctx, len(ts), func(i int) error {
		var res struct{ Rate float64 }
		err := h.exec(ctx, su[i].t, progs[programOf(ts[i].Work)].cmd, append(su[i].env, line.env(i)...), &res, su[i].started, workArgs(ts[i].Work, secs)...)
		got[i] = 100 * res.Rate / solo[ts[i].Work]
		return err
	})
	for i, err := range errs {
		if err != nil {
			return got, fmt.Errorf("tenant %d (%s %d): %w", i+1, ts[i].Work, ts[i].Cores, err)
		}
	}
	return got, nil
}

// rootSet is the tenants' unshare pids, filled in as they start.
type rootSet struct {
	mu sync.Mutex
	m  map[int]string
}

func (s *rootSet) add(pid int, key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.m[pid] = key
}

func (s *rootSet) snapshot() map[int]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.m)
}

// pidSampler averages NVML's per-process SM utilization per tenant over the
// second half of a share row (the signal issue 21 weighs for attribution:
// about one sample per process per second, keyed by host pids).
type pidSampler struct {
	dev    nvml.Device
	every  time.Duration // between polls
	owners func() map[int]string
	sum    map[string]float64
	n      map[string]int
}

func newPidSampler(dev nvml.Device, owners func() map[int]string) *pidSampler {
	return &pidSampler{dev: dev, every: 500 * time.Millisecond, owners: owners, sum: map[string]float64{}, n: map[string]int{}}
}

func (s *pidSampler) run(ctx context.Context, wait time.Duration) {
	var last uint64
	ticks(ctx, wait, s.every, func() {
		if last == 0 {
			last = uint64(time.Now().UnixMicro()) - uint64(s.every/time.Microsecond)
		}
		samples, ret := compute.ProcessUtilization(s.dev, last) // go-nvml's own call can panic
		if ret != nvml.SUCCESS {
			return
		}
		owners := s.owners()
		for _, sm := range samples {
			last = max(last, sm.TimeStamp)
			if key, ok := owners[int(sm.Pid)]; ok {
				s.sum[key] += float64(sm.SmUtil)
				s.n[key]++
			}
		}
	})
}

// summary: "nvml per-pid sm% 31+58 (4+5 samples)", or "" without samples.
func (s *pidSampler) summary(keys []string) string {
	avg, cnt := make([]string, len(keys)), make([]string, len(keys))
	any := false
	for i, k := range keys {
		avg[i], cnt[i] = "-", fmt.Sprint(s.n[k])
		if s.n[k] > 0 {
			avg[i], any = fmt.Sprintf("%.0f", s.sum[k]/float64(s.n[k])), true
		}
	}
	if !any {
		return ""
	}
	return fmt.Sprintf("nvml per-pid sm%% %s (%s samples)", strings.Join(avg, "+"), strings.Join(cnt, "+"))
}
