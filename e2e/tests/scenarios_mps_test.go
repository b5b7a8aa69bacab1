//go:build e2e

package tests

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	batchv1alpha1 "volcano.sh/apis/pkg/apis/batch/v1alpha1"

	"github.com/volcano-vgpu/volcano-vgpu/api"
	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/mps"
	"github.com/volcano-vgpu/volcano-vgpu/e2e/cluster"
	"github.com/volcano-vgpu/volcano-vgpu/e2e/kubeletemu"
	"github.com/volcano-vgpu/volcano-vgpu/e2e/sim/mpsfake"
)

// restartPluginWith restarts node's device plugin with extra appended to
// its configuration ("" restores the shared file), and waits until the
// cluster is ready again.
func restartPluginWith(t *testing.T, ctx context.Context, node, extra string) {
	t.Helper()
	restartPluginWithMIG(t, ctx, node, extra, nil)
}

// restartPluginWithMIG is restartPluginWith where the node's simulated NVML
// also has MIG mode on for the GPUs at migGPUs (none: as the cluster file
// says).
func restartPluginWithMIG(t *testing.T, ctx context.Context, node, extra string, migGPUs []int) {
	t.Helper()
	cfg := shared.cl.Config
	if extra != "" {
		cfg.DevicePluginNodeConfig = map[string]string{node: extra}
	}
	if len(migGPUs) > 0 {
		cfg.DevicePluginNodeMIG = map[string][]int{node: migGPUs}
	}
	if _, err := killComponent(cluster.DevicePluginName(node)); err != nil {
		t.Fatal(err)
	}
	if _, err := cluster.Up(ctx, cfg); err != nil {
		t.Fatal(err)
	}
}

// pluginSamples scrapes every labelled volcano_vgpu sample of node's device
// plugin.
func pluginSamples(ctx context.Context, node string) ([]cluster.Sample, error) {
	idx := slices.Index(nodeNames(), node)
	if idx < 0 {
		return nil, fmt.Errorf("no simulated node %q", node)
	}
	return cluster.Samples(ctx, fmt.Sprintf("http://127.0.0.1:%d/metrics", shared.cl.Config.Ports.DevicePluginMetricsOffset+idx))
}

// sampleOf is the value of the sample name that carries every one
// of labels (`key="value"`); ok false when there is none.
func sampleOf(samples []cluster.Sample, name string, labels ...string) (float64, bool) {
	for _, s := range samples {
		if s.Name != name {
			continue
		}
		all := true
		for _, l := range labels {
			all = all && strings.Contains(","+s.Labels+",", ","+l+",")
		}
		if all {
			return s.Value, true
		}
	}
	return 0, false
}

// waitSample waits until node's plugin exports name{labels} = want.
func waitSample(t *testing.T, ctx context.Context, node string, want float64, name string, labels ...string) {
	t.Helper()
	waitFor(t, ctx, fmt.Sprintf("%s{%s} = %g on %s", name, strings.Join(labels, ","), want, node), func() error {
		s, err := pluginSamples(ctx, node)
		if err != nil {
			return err
		}
		if v, ok := sampleOf(s, name, labels...); !ok || v != want {
			return fmt.Errorf("got %g (exported %t)", v, ok)
		}
		return nil
	})
}

// waitAllocatable waits until node advertises n vgpu-number replicas.
func waitAllocatable(t *testing.T, ctx context.Context, node string, n int64) {
	t.Helper()
	waitFor(t, ctx, fmt.Sprintf("%s allocatable %s = %d", node, api.DefaultResourceNumber, n), func() error {
		nd, err := shared.kube.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		q := nd.Status.Allocatable[api.DefaultResourceNumber]
		if q.Value() != n {
			return fmt.Errorf("%d", q.Value())
		}
		return nil
	})
}

// mpsTask is a Volcano Job task of one pod asking one GPU with memMiB and
// cores in the sharing mode (volcano.sh/vgpu-mode spelling).
func mpsTask(ns, name string, memMiB, cores int64, mode string) batchv1alpha1.TaskSpec {
	task := gpuJob(ns, "x", 1, 1, memMiB, cores, map[string]string{api.VolcanoModeKey: mode}).Spec.Tasks[0]
	task.Name = name
	return task
}

// TestScenarioMPS: an L4 node whose GPU 0 is in MPS mode (the device
// plugin's sharing.gpus, by UUID), the other three time-sliced. A Volcano
// Job's pods asking volcano.sh/vgpu-mode: mps (30% and 60%) land on the MPS
// GPU with the MPS variables, the daemon's pipe directory (read-only, the
// fake daemon's socket in it) and libvcuda's memory cap; the pod asking
// hami-core lands on a time-sliced GPU without them; an mps pod pinned to a
// node without MPS GPUs stays pending with the mode in its reason. The metrics show each
// GPU's mode, the daemon up, the server held at the largest share and each
// MPS container's percentage and pinned limit. A fatal fault of the MPS
// server makes the GPU unhealthy (inventory, allocatable) until the faulted
// server exits and a fresh one answers; a crashed daemon is counted, started
// again, and the GPU answers again.
func TestScenarioMPS(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	const node = "l4-0" // 4 GPUs × maxShares 10
	waitNodeFree(t, ctx, node)
	gpus := inventories(t, ctx)[node].GPUs
	mpsGPU := gpus[0].UUID

	restartPluginWith(t, ctx, node, "sharing:\n  gpus:\n    "+mpsGPU+": mps\n")
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		// back to the shared file: the plugin stops the GPU's daemon
		restartPluginWith(t, ctx, node, "")
	})
	ns := newNamespace(t, ctx) // its pods are gone before the plugin is restored
	waitFor(t, ctx, "GPU 0 of "+node+" published in mps mode", func() error {
		for _, g := range inventories(t, ctx)[node].GPUs {
			want := api.ModeTimeSliced
			if g.UUID == mpsGPU {
				want = api.ModeMPS
			}
			if g.SharingMode() != want || !g.Healthy {
				return fmt.Errorf("%s: mode %s, healthy %t; want %s, healthy", g.UUID, g.SharingMode(), g.Healthy, want)
			}
		}
		return nil
	})

	job := gpuJob(ns, "mps", 1, 1, 2048, 30, nil)
	job.Spec.Tasks = []batchv1alpha1.TaskSpec{
		mpsTask(ns, "small", 2048, 30, "mps"),
		mpsTask(ns, "large", 4096, 60, "mps"),
		mpsTask(ns, "sliced", 1024, 25, "hami-core"),
	}
	job.Spec.MinAvailable = 3
	createJob(t, ctx, pinJob(job, node))
	pods := waitJobRunning(t, ctx, ns, "mps", 3)

	var pipe kubeletemu.Mount
	for _, p := range pods {
		rec := waitAllocated(t, ctx, p)
		if len(rec.Containers) != 1 || rec.Containers[0].Response == nil {
			t.Fatalf("%s: kubelet record %+v, want one served container", p.Name, rec.Containers)
		}
		resp := rec.Containers[0].Response
		lc := limiterConfig(t, resp)
		on := gpusOf(t, p)
		task := strings.TrimSuffix(strings.TrimPrefix(p.Name, "mps-"), "-0")
		if task == "sliced" {
			if slices.Contains(on, mpsGPU) {
				t.Errorf("%s asks hami-core and runs on the MPS GPU %s", p.Name, mpsGPU)
			}
			if _, ok := resp.Mount(api.MPSPipeDir); ok || resp.Envs[api.EnvMPSThreads] != "" || lc.MPSThreadPercent != 0 {
				t.Errorf("%s on a time-sliced GPU got MPS: env %q, limiter mps_thread_percent %d", p.Name, resp.Envs[api.EnvMPSThreads], lc.MPSThreadPercent)
			}
			continue
		}
		cores, mem := map[string]int64{"small": 30, "large": 60}[task], map[string]int64{"small": 2048, "large": 4096}[task]
		if !slices.Equal(on, []string{mpsGPU}) {
			t.Errorf("%s asks mps and runs on %v, want the MPS GPU %s", p.Name, on, mpsGPU)
		}
		for k, want := range map[string]string{api.EnvMPSPipeDir: api.MPSPipeDir, api.EnvMPSThreads: strconv.FormatInt(cores, 10),
			api.EnvMPSPinnedMem: fmt.Sprintf("0=%dM", mem)} {
			if got := resp.Envs[k]; got != want {
				t.Errorf("%s: %s=%q, want %q", p.Name, k, got, want)
			}
		}
		m, ok := resp.Mount(api.MPSPipeDir)
		switch {
		case !ok || !m.ReadOnly:
			t.Errorf("%s: MPS pipe directory mount %+v (found %t), want it read-only", p.Name, m, ok)
		case filepath.Base(filepath.Dir(m.HostPath)) != mpsGPU:
			t.Errorf("%s: pipe directory %s is not the MPS GPU's own", p.Name, m.HostPath)
		}
		if _, err := os.Stat(filepath.Join(m.HostPath, mpsfake.SocketName)); err != nil {
			t.Errorf("%s: no daemon socket in its pipe directory: %v", p.Name, err)
		}
		if _, ok := resp.Mount(api.MPSShmPath); !ok {
			t.Errorf("%s: no %s mount (MPS clients and their server share memory there)", p.Name, api.MPSShmPath)
		}
		if lc.MPSThreadPercent != uint32(cores) || len(lc.Devices) != 1 || lc.Devices[0].MemoryLimitBytes != uint64(mem)<<20 || lc.Devices[0].CorePercent != 100 {
			t.Errorf("%s: limiter config mps_thread_percent %d, devices %+v; want %d, a %d MiB cap, no launch throttle (100)", p.Name, lc.MPSThreadPercent, lc.Devices, cores, mem)
		}
		pipe = m
	}
	if t.Failed() {
		t.FailNow()
	}

	gpu := `gpu_uuid="` + mpsGPU + `"`
	samples, err := pluginSamples(ctx, node)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"volcano_vgpu_gpu_sharing_mode", []string{gpu, `mode="mps"`}, 1},
		{"volcano_vgpu_gpu_sharing_mode", []string{`gpu_uuid="` + gpus[1].UUID + `"`, `mode="time-sliced"`}, 1},
		{"volcano_vgpu_gpu_mps_daemon_up", []string{gpu}, 1},
		{"volcano_vgpu_gpu_mps_server_active_thread_ratio", []string{gpu}, 0.6},
		{"volcano_vgpu_container_mps_active_thread_ratio", []string{`pod="mps-small-0"`, gpu}, 0.3},
		{"volcano_vgpu_container_mps_pinned_memory_limit_bytes", []string{`pod="mps-large-0"`, gpu}, 4096 << 20},
	} {
		if v, ok := sampleOf(samples, c.name, c.labels...); !ok || v != c.want {
			t.Errorf("%s{%s} = %g (exported %t), want %g", c.name, strings.Join(c.labels, ","), v, ok, c.want)
		}
	}
	if _, ok := sampleOf(samples, "volcano_vgpu_container_mps_active_thread_ratio", `pod="mps-sliced-0"`); ok {
		t.Error("the time-sliced pod has an MPS percentage series")
	}

	// A node without an MPS GPU: an mps pod stays pending, and says why.
	lone := gpuPod(ns, "mps-elsewhere", "l4-1", 1, 1024, 10)
	lone.Annotations = map[string]string{api.VolcanoModeKey: "mps"}
	if _, err := createPods(ctx, []*corev1.Pod{lone}, 1, nil); err != nil {
		t.Fatal(err)
	}
	t.Logf("mps pod on a node without MPS GPUs: %s", waitUnschedulable(t, ctx, ns, lone.Name, "no GPU in mps mode"))

	// The daemon, as the plugin runs it: its directory holds the pipe
	// directory the containers got.
	d := &mps.Daemon{UUID: mpsGPU, Dir: filepath.Dir(pipe.HostPath), Command: filepath.Join(shared.cl.Config.BinDir, "fake-mps-control"), Timeout: 10 * time.Second}
	server := func() (pid int, percent string) {
		t.Helper()
		servers, err := d.Servers(ctx)
		if err != nil || len(servers) != 1 || servers[0].Status != "ACTIVE" {
			t.Fatalf("servers of the MPS daemon: %+v, %v; want one ACTIVE", servers, err)
		}
		out, err := d.Control(ctx, fmt.Sprintf("get_active_thread_percentage %d", servers[0].PID))
		if err != nil {
			t.Fatal(err)
		}
		return servers[0].PID, strings.TrimSpace(out)
	}
	first, pct := server()
	if pct != "60.0" {
		t.Errorf("server %d held at %s%%, want 60.0 (the largest share on the GPU)", first, pct)
	}

	// A client's fatal fault ends every client of the server: the GPU is
	// unhealthy until the faulted server exits and a fresh one answers.
	if _, err := d.Control(ctx, fmt.Sprintf("fake_fault %d", first)); err != nil {
		t.Fatal(err)
	}
	faulted := time.Now()
	waitGPUHealth(t, ctx, node, mpsGPU, false)
	waitAllocatable(t, ctx, node, 30) // 3 healthy GPUs × 10
	t.Logf("MPS GPU unhealthy in the inventory and allocatable %s after the fault (probe interval 2s)", time.Since(faulted).Round(100*time.Millisecond))
	waitSample(t, ctx, node, 1, "volcano_vgpu_gpu_mps_daemon_failure", gpu, `reason="server_fault"`)
	waitSample(t, ctx, node, 0, "volcano_vgpu_gpu_mps_daemon_up", gpu)
	for _, g := range gpus[1:] {
		waitGPUHealth(t, ctx, node, g.UUID, true) // the fault touches no other GPU
	}
	if _, err := d.Control(ctx, fmt.Sprintf("fake_server_exit %d 1", first)); err != nil {
		t.Fatal(err)
	}
	exited := time.Now()
	waitGPUHealth(t, ctx, node, mpsGPU, true)
	waitAllocatable(t, ctx, node, 40)
	t.Logf("MPS GPU healthy again %s after the faulted server exited", time.Since(exited).Round(100*time.Millisecond))
	waitSample(t, ctx, node, 1, "volcano_vgpu_gpu_mps_daemon_up", gpu)
	waitSample(t, ctx, node, 1, "volcano_vgpu_gpu_mps_daemon_failures_total", gpu, `reason="server_fault"`)
	if pid, pct := server(); pid == first || pct != "60.0" {
		t.Errorf("after the fault: server %d at %s%%, want a fresh one (not %d) held at 60.0", pid, pct, first)
	}

	// A crashed daemon: counted, started again, the GPU answers again.
	_, _ = d.Control(ctx, "fake_crash")
	waitSample(t, ctx, node, 1, "volcano_vgpu_gpu_mps_daemon_failures_total", gpu, `reason="no_answer"`)
	waitSample(t, ctx, node, 1, "volcano_vgpu_gpu_mps_daemon_up", gpu)
	waitGPUHealth(t, ctx, node, mpsGPU, true)
	if _, pct := server(); pct != "60.0" {
		t.Errorf("after the crash: the fresh daemon's server at %s%%, want 60.0", pct)
	}
	waitAllocatable(t, ctx, node, 40)
}
