package memguard

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
	testclock "k8s.io/utils/clock/testing"

	"github.com/volcano-vgpu/volcano-vgpu/api"
	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/containerdir"
	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/procmap"
	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/reschedule"
)

// The tamper scenario on the fake driver, each tenant an emulated container:
// its own pid namespace and /proc (unshare), its own cgroup named as kubelet
// names it, libvcuda.so preloaded with its limiter config, the workload tool
// holding device memory. The guard runs in this test process over go-nvml
// loading the fake libnvidia-ml.so.1, reading host pids.

var build = filepath.Join("..", "..", "vcuda", "_build")

const gpuMiB = 32768

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "vgpu-memguard-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	// The fake NVML reads its devices once per process, at init.
	os.Setenv("FAKEGPU_DIR", dir)
	os.Setenv("FAKEGPU_DEVICES", fmt.Sprintf("GPU-%08x-0000-4000-8000-00000000000a:%d", os.Getpid(), gpuMiB))
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// container is an emulated container with one pod UID, one runtime ID and
// one cgroup; its first process is pid 1 of its own pid namespace.
type container struct {
	t                  *testing.T
	podUID, id, cgroup string
	cfg, shared        string
	init               *exec.Cmd
}

func newContainer(t *testing.T, uuid string, capMiB int64) *container {
	t.Helper()
	tag := fmt.Sprintf("%08x", os.Getpid())
	n := len(t.Name()) + len(strconv.Itoa(int(capMiB)))
	c := &container{t: t,
		podUID: fmt.Sprintf("%s-%04x-4000-8000-%012x", tag, n, capMiB),
		id:     fmt.Sprintf("%056x%s", capMiB, tag)}
	c.cgroup = filepath.Join("/sys/fs/cgroup/pids/kubepods/burstable", "pod"+c.podUID, c.id)
	if err := os.MkdirAll(c.cgroup, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Killed with unshare, the container's processes end asynchronously.
		for i := 0; i < 1000; i++ {
			if b, err := os.ReadFile(filepath.Join(c.cgroup, "cgroup.procs")); err != nil || len(strings.TrimSpace(string(b))) == 0 {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		_ = os.Remove(c.cgroup)
		_ = os.Remove(filepath.Dir(c.cgroup))
	})
	dir := t.TempDir()
	c.shared = filepath.Join(dir, "shared")
	if err := os.MkdirAll(c.shared, 0o777); err != nil {
		t.Fatal(err)
	}
	lc := api.LimiterConfig{Policy: api.ComputeNone, PodUID: c.podUID, PodNamespace: "ns", PodName: "pod-" + c.podUID[:8],
		ContainerName: "main", SharedDir: c.shared,
		Devices: []api.LimiterDevice{{UUID: uuid, MemoryLimitBytes: uint64(capMiB) << 20, CorePercent: 100}}}
	b, err := lc.Encode()
	if err != nil {
		t.Fatal(err)
	}
	c.cfg = filepath.Join(dir, "vcuda.config")
	if err := os.WriteFile(c.cfg, b, 0o444); err != nil {
		t.Fatal(err)
	}
	if err := containerdir.CreateControl(filepath.Join(dir, api.ControlFile), 1); err != nil {
		t.Fatal(err)
	}
	return c
}

// hold is the workload tool, libvcuda preloaded, holding mib until killed
// (launching 100 ms kernels meanwhile, so it mostly sleeps).
func (c *container) hold(mib int) string {
	w, _ := filepath.Abs(filepath.Join(build, "workload"))
	return fmt.Sprintf("exec %s --hold-mib %d --chunk-mib 1 --max-alloc-mib 1 --grid 100000 --seconds 600", w, mib)
}

func (c *container) env() []string {
	lib, _ := filepath.Abs(build)
	return append(os.Environ(), "LD_PRELOAD="+filepath.Join(lib, "libvcuda.so"),
		"LD_LIBRARY_PATH="+filepath.Join(lib, "fake"), "VCUDA_CONFIG="+c.cfg)
}

// start runs script as the container's first process (pid 1 in a new pid
// namespace with its own /proc) and waits until it holds its memory.
// It returns the process's host pid.
func (c *container) start(script string) int {
	c.t.Helper()
	cmd := exec.Command("sh", "-c", `echo $$ > "$1/cgroup.procs" && exec unshare --pid --fork --kill-child --mount-proc sh -c "$2"`, "sh", c.cgroup, script)
	c.init = cmd
	return c.run(cmd)
}

// exec runs script as another process of the running container (as kubectl
// exec does: its pid namespace, its mounts, its cgroup).
func (c *container) exec(script string) (*exec.Cmd, int) {
	c.t.Helper()
	return c.execEnv(script, c.env())
}

// execEnv is exec with the process's environment.
func (c *container) execEnv(script string, env []string) (*exec.Cmd, int) {
	c.t.Helper()
	cmd := exec.Command("sh", "-c", `echo $$ > "$1/cgroup.procs" && exec nsenter -t "$2" -p -m sh -c "$3"`, "sh", c.cgroup, strconv.Itoa(innermost(c.t, c.init.Process.Pid)), script)
	cmd.Env = env
	return cmd, c.run(cmd)
}

func (c *container) run(cmd *exec.Cmd) int {
	c.t.Helper()
	if cmd.Env == nil {
		cmd.Env = c.env()
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		c.t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	held := make(chan string, 1)
	go func() {
		sc, said := bufio.NewScanner(stderr), ""
		for sc.Scan() {
			said += sc.Text() + "\n"
			if strings.Contains(sc.Text(), "workload: holding") {
				held <- ""
				break
			}
		}
		held <- said
		_, _ = io.Copy(io.Discard, stderr)
	}()
	select {
	case said := <-held:
		if said != "" {
			c.t.Fatalf("the workload did not hold its memory:\n%s", said)
		}
	case <-time.After(30 * time.Second):
		c.t.Fatal("the workload did not hold its memory within 30 s")
	}
	return innermost(c.t, cmd.Process.Pid)
}

// innermost follows single children from pid down to the process that runs
// the workload (sh → unshare/nsenter → workload) and returns its host pid.
func innermost(t *testing.T, pid int) int {
	t.Helper()
	for {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
		f := strings.Fields(string(b))
		if len(f) != 1 {
			return pid
		}
		pid, _ = strconv.Atoi(f[0])
	}
}

func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	return err == nil && !strings.Contains(string(b), ") Z ")
}

// TestTamperedContainerIsCaught: a process of the tamperer's container gets
// around libvcuda's accounting, then takes a whole cap more; the guard kills
// it, says so on the pod and counts it; the first process of the container
// and the honest neighbour on the same GPU keep running with their memory.
func TestTamperedContainerIsCaught(t *testing.T) {
	for _, tc := range []struct {
		name   string
		tamper func(c *container) string // the second process's shell: it takes 8192 MiB more
	}{
		{"removes the shared accounting files", func(c *container) string {
			return fmt.Sprintf("rm %[1]s/vcuda.region %[1]s/vcuda.slots && ", c.shared) + c.hold(8192)
		}},
		{"zeroes the mapped region", func(c *container) string {
			return fmt.Sprintf("f=%s/vcuda.region && head -c $(stat -c %%s $f) /dev/zero | dd of=$f conv=notrunc status=none && ", c.shared) + c.hold(8192)
		}},
		// libvcuda loaded, but the memory taken through the driver's own copy in
		// another link-map namespace (dlmopen), which libvcuda never sees
		{"allocates through a driver loaded with dlmopen", func(c *container) string {
			lib, _ := filepath.Abs(filepath.Join(build, "libnsdriver.so"))
			return c.hold(8192) + " --hold-via " + lib
		}},
	} {
		t.Run(tc.name, func(t *testing.T) { tamperScenario(t, tc.tamper) })
	}
}

// onFakeDriver skips without root or cgroup v1's pids hierarchy (the
// emulated containers need both) and returns the fake GPU's NVML and UUID.
func onFakeDriver(t *testing.T) (*NVMLSource, string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: pid namespaces and cgroups")
	}
	for _, p := range []string{"/sys/fs/cgroup/pids/cgroup.procs"} {
		if _, err := os.Stat(p); err != nil {
			t.Skipf("no cgroup v1 pids hierarchy: %v", err)
		}
	}
	for _, f := range []string{"libvcuda.so", "workload", "libnsdriver.so", "fake/libnvidia-ml.so.1"} {
		if _, err := os.Stat(filepath.Join(build, f)); err != nil {
			t.Fatalf("limiter build missing %s: run make -C vcuda: %v", f, err)
		}
	}
	lib := nvml.New(nvml.WithLibraryPath(filepath.Join(build, "fake", "libnvidia-ml.so.1")))
	if ret := lib.Init(); ret != nvml.SUCCESS {
		t.Fatalf("fake NVML init: %v", ret)
	}
	uuid, _, _ := strings.Cut(os.Getenv("FAKEGPU_DEVICES"), ":")
	return &NVMLSource{Lib: lib}, uuid
}

// testGuard is a Runner on the fake driver's NVML for tenants in emulated
// containers, its Events going to a fake API server.
type testGuard struct {
	r      *Runner
	mapper procmap.Mapper
	client *fake.Clientset
	m      *Metrics
	ctx    context.Context
	logger klog.Logger
}

func newTestGuard(t *testing.T, src Source, tenants []Tenant, cs ...*container) *testGuard {
	ids := map[string]string{}
	for _, c := range cs {
		ids[c.podUID+"/"+c.id] = "main"
	}
	g := &testGuard{mapper: procmap.Mapper{Names: func(pod, id string) (string, bool) { n, ok := ids[pod+"/"+id]; return n, ok }},
		client: fake.NewSimpleClientset(), m: NewMetrics(nil)}
	var ctx context.Context
	g.logger, ctx = ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)
	rec, stop := reschedule.Recorder(ctx, g.client, "node-1")
	t.Cleanup(stop)
	g.ctx = ctx
	g.r = &Runner{Source: src, List: func() []Tenant { return tenants }, Owners: g.mapper.Owners,
		Policy: Policy{ToleranceMiB: 64, UncountedContextMiB: 512}, Period: time.Second,
		Clock: testclock.NewFakeClock(time.Now()), Recorder: rec, Metrics: g.m}
	return g
}

func tamperScenario(t *testing.T, tamperWith func(c *container) string) {
	src, uuid := onFakeDriver(t)
	tamperer, honest := newContainer(t, uuid, 8192), newContainer(t, uuid, 4096)
	honestPID := honest.start(honest.hold(4000))
	firstPID := tamperer.start(tamperer.hold(6000))

	tenants := []Tenant{
		{Key: tamperer.podUID + "/main", PodUID: tamperer.podUID, Namespace: "ns", Pod: "tamperer", Container: "main", UUID: uuid, Model: "Fake GPU", CapMiB: 8192},
		{Key: honest.podUID + "/main", PodUID: honest.podUID, Namespace: "ns", Pod: "honest", Container: "main", UUID: uuid, Model: "Fake GPU", CapMiB: 4096},
	}
	g := newTestGuard(t, src, tenants, tamperer, honest)
	logger, ctx, client, m, r := g.logger, g.ctx, g.client, g.m, g.r

	if kills := r.Tick(ctx); len(kills) != 0 {
		t.Fatalf("honest containers: the guard killed %+v", kills)
	}
	// The tamperer's second process gets around libvcuda's accounting and
	// takes a whole cap more.
	cmd, tamperPID := tamperer.exec(tamperWith(tamperer))
	held := map[uint32]uint64{}
	procs, err := src.Running(uuid)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range procs {
		held[uint32(p.PID)] = p.UsedBytes / MiB
	}
	// What libvcuda let through once its files were gone (fake driver):
	// 6000 + 8192 MiB + the 1 MiB chunks in flight, under an 8192 MiB cap.
	if held[uint32(firstPID)]+held[uint32(tamperPID)] < 14192 {
		t.Fatalf("the tamperer did not get past its cap (host pids %d, %d): NVML lists %v", firstPID, tamperPID, held)
	}
	logger.Info("Tampered", "heldMiB", held, "first", firstPID, "tamperer", tamperPID, "honest", honestPID)

	kills := r.Tick(ctx)
	if len(kills) != 1 || kills[0].PID != uint32(tamperPID) {
		t.Fatalf("kills = %+v, want the tamperer's process %d alone", kills, tamperPID)
	}
	if err := cmd.Wait(); err == nil || !strings.Contains(err.Error(), "killed") {
		t.Errorf("the tamperer's process ended with %v, want killed", err)
	}
	for name, pid := range map[string]int{"the tamperer's first process": firstPID, "the honest neighbour": honestPID} {
		if !alive(pid) {
			t.Errorf("%s (host pid %d) was killed too", name, pid)
		}
	}
	// The neighbour keeps its memory; the tamperer's container is back under its cap.
	after := map[uint32]uint64{}
	procs, err = src.Running(uuid)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range procs {
		after[uint32(p.PID)] = p.UsedBytes / MiB
	}
	if diff := cmp.Diff(map[uint32]uint64{uint32(honestPID): 4000, uint32(firstPID): 6000}, after); diff != "" {
		t.Errorf("NVML after the kill (-want +got):\n%s", diff)
	}
	if kills := r.Tick(ctx); len(kills) != 0 {
		t.Errorf("the next period killed %+v", kills)
	}

	k := kills[0]
	want := fmt.Sprintf("the container held %d MiB on GPU %s (index 0), over its cap of 8192 MiB", k.HeldBytes/MiB, uuid)
	var msg string
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline) && msg == ""; time.Sleep(20 * time.Millisecond) {
		evs, err := client.CoreV1().Events("ns").List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range evs.Items {
			if e.Reason == ReasonCapExceeded && e.Type == "Warning" && e.InvolvedObject.Name == "tamperer" {
				msg = e.Message
			}
		}
	}
	if !strings.Contains(msg, want) || k.HeldBytes/MiB < 14192 {
		t.Errorf("Event %q: want it to say %q (held ≥ 14192 MiB)", msg, want)
	}
	lv := []string{"ns", "tamperer", "main", uuid, "0", "Fake GPU"}
	if got := testutil.ToFloat64(m.Kills.WithLabelValues(lv...)); got != 1 {
		t.Errorf("kills counter = %v, want 1", got)
	}
	if got := testutil.ToFloat64(m.Held.WithLabelValues("ns", "honest", "main", uuid, "0", "Fake GPU")); got != 4000*MiB {
		t.Errorf("honest held gauge = %v MiB, want 4000", got/MiB)
	}
	t.Logf("fake driver: %d MiB held under an 8192 MiB cap after the tampering; the guard killed the %d MiB process, the neighbour kept its 4000 MiB", k.HeldBytes/MiB, k.ProcessBytes/MiB)
}
