package plugin

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/google/go-cmp/cmp"

	"github.com/volcano-vgpu/volcano-vgpu/api"
	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/config"
	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/metrics"
	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/mps"
)

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("timed out waiting for %s", what)
}

// The plugin runs the MPS GPU's daemon, sets its compute mode, and reports
// a crashed daemon as the GPU's health until a fresh one answers.
func TestPluginSupervisesMPS(t *testing.T) {
	t.Setenv(fakeMPSEnv, "1")
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	e, _ := mpsEnv(t, func(c *config.Config) {
		c.MPS.ControlCommand = self
		c.MPS.ProbeTimeout.Duration = time.Minute // each command execs this test binary: slow under -race
	})
	gpu := e.gpu(1)
	d := e.p.daemon(gpu)
	t.Cleanup(func() { _ = d.Stop(context.Background()) })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.p.runMPS(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	healthy := func() bool {
		for _, g := range e.p.Inventory().GPUs {
			if g.UUID == gpu {
				return g.Healthy
			}
		}
		return false
	}
	eventually(t, "the supervisor to wait on its ticker", e.clock.HasWaiters)
	if !healthy() {
		t.Fatalf("MPS GPU unhealthy after start: %v", e.p.health.Reasons()[gpu])
	}
	if m := e.sim.ComputeMode(gpu); m != nvml.COMPUTEMODE_EXCLUSIVE_PROCESS {
		t.Errorf("compute mode of the MPS GPU = %v, want EXCLUSIVE_PROCESS", m)
	}
	if m := e.sim.ComputeMode(e.gpu(0)); m != nvml.COMPUTEMODE_DEFAULT {
		t.Errorf("compute mode of a time-sliced GPU = %v, want DEFAULT", m)
	}
	mpsMetrics(t, e, "after start", &metrics.MPSDaemon{Up: true, Threads: 100, Failures: map[string]uint64{}}) // nothing booked: the server at 100%

	// A 60% container raises the server's ceiling before it starts.
	s := share(1)
	s.cores = 60
	e.add(t, pod("p1").app("main", s).obj(t, e))
	e.kubelet.set("p1", map[string][]string{"main": nil})
	if _, err := e.p.Allocate(ctx, []string{e.id(1, 0)}); err != nil {
		t.Fatal(err)
	}
	servers, err := d.Servers(ctx)
	if err != nil || len(servers) != 1 {
		t.Fatalf("servers = %v, %v", servers, err)
	}
	if out, _ := d.Control(ctx, fmt.Sprintf("get_active_thread_percentage %d", servers[0].PID)); strings.TrimSpace(out) != "60.0" {
		t.Errorf("server percentage after a 60%% container = %q, want 60.0", out)
	}
	mpsMetrics(t, e, "a 60% container", &metrics.MPSDaemon{Up: true, Threads: 60, Failures: map[string]uint64{}})
	var served []metrics.Container
	for _, c := range e.p.snapshot().Containers {
		if c.Pod == "p1" {
			served = append(served, c)
		}
	}
	if len(served) != 1 || served[0].MPSThreads != 60 || served[0].MPSPinnedMiB != s.mem {
		t.Errorf("p1's series: %+v, want 60%% threads and %d MiB pinned", served, s.mem)
	}

	changed := e.p.DevicesChanged()
	_, _ = d.Control(ctx, "fake_crash")
	e.clock.Step(e.cfg.MPS.ProbeInterval.Duration)
	eventually(t, "the GPU to turn unhealthy", func() bool { return !healthy() })
	// the tracker records the reason before it wakes the streams: wait for
	// the wake (a non-blocking look missed it once on a fresh clone)
	select {
	case <-changed:
	case <-time.After(10 * time.Second):
		t.Error("ListAndWatch was not woken by the MPS failure")
	}
	if r := strings.Join(e.p.health.Reasons()[gpu], "; "); !strings.Contains(r, "mps: MPS control daemon does not answer") {
		t.Errorf("reason = %q, want the MPS daemon named", r)
	}
	mpsMetrics(t, e, "a crashed daemon", &metrics.MPSDaemon{Reason: mps.ReasonNoAnswer, Threads: 60, Failures: map[string]uint64{mps.ReasonNoAnswer: 1}})
	eventually(t, "the supervisor to wait again", e.clock.HasWaiters)
	e.clock.Step(e.cfg.MPS.ProbeInterval.Duration)
	eventually(t, "the GPU to recover with a fresh daemon", healthy)
	mpsMetrics(t, e, "a fresh daemon", &metrics.MPSDaemon{Up: true, Threads: 60, Failures: map[string]uint64{mps.ReasonNoAnswer: 1}})
}

// mpsMetrics checks what the metrics show of the MPS GPU (1) and that the
// time-sliced GPU 0 shows no MPS daemon.
func mpsMetrics(t *testing.T, e *testEnv, when string, want *metrics.MPSDaemon) {
	t.Helper()
	for _, g := range e.p.snapshot().GPUs {
		switch g.UUID {
		case e.gpu(0):
			if g.Mode != api.ModeTimeSliced || g.MPS != nil {
				t.Errorf("%s: time-sliced GPU: mode %q, MPS %+v", when, g.Mode, g.MPS)
			}
		case e.gpu(1):
			if g.Mode != api.ModeMPS {
				t.Errorf("%s: MPS GPU: mode %q", when, g.Mode)
			}
			if d := cmp.Diff(want, g.MPS); d != "" {
				t.Errorf("%s: MPS daemon in the metrics (-want +got):\n%s", when, d)
			}
		}
	}
}
