package health

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/gpu"
	"github.com/volcano-vgpu/volcano-vgpu/e2e/sim/nvmlsim"
	"github.com/volcano-vgpu/volcano-vgpu/e2e/sim/simconfig/simtest"
)

// runEnv runs a tracker on a simulated node with a fake clock.
type runEnv struct {
	sim   *nvmlsim.Sim
	devs  []gpu.Device
	tr    *Tracker
	clock *clocktesting.FakeClock
	mu    sync.Mutex
	saved []map[string]Unhealthy
}

func startRun(t *testing.T) *runEnv {
	t.Helper()
	node := simtest.LocalNode(t, "l4-0")
	e := &runEnv{sim: nvmlsim.New(node), clock: clocktesting.NewFakeClock(t0)}
	lib, err := gpu.New(e.sim)
	if err != nil {
		t.Fatal(err)
	}
	if e.devs, err = lib.Devices(); err != nil {
		t.Fatal(err)
	}
	e.tr = NewTracker(e.devs, Options{IgnoredXIDs: []uint64{43}, QuietPeriod: 5 * time.Minute}, nil, t0)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		e.tr.Run(ctx, lib, e.devs, RunOptions{Clock: e.clock, ProbeInterval: 10 * time.Second, WaitMs: 5,
			Save: func(s map[string]Unhealthy) error {
				e.mu.Lock()
				e.saved = append(e.saved, s)
				e.mu.Unlock()
				return nil
			}})
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Error("Run did not return after its context ended")
		}
	})
	return e
}

func (e *runEnv) waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(2 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("never: %s (unhealthy %v)", what, e.tr.Unhealthy())
		}
	}
}

// step moves the fake clock once the probe loop waits on its ticker.
func (e *runEnv) step(d time.Duration) {
	for !e.clock.HasWaiters() {
		time.Sleep(time.Millisecond)
	}
	e.clock.Step(d)
}

func TestRunGPUFallsOffAndComesBack(t *testing.T) {
	e := startRun(t)
	lost := e.devs[1].UUID
	if err := e.sim.InjectXID(lost, 43); err != nil { // application error
		t.Fatal(err)
	}
	if err := e.sim.FallOffBus(lost); err != nil {
		t.Fatal(err)
	}
	e.waitFor(t, "the lost GPU unhealthy", func() bool { return !e.tr.Healthy(lost) })
	for range 60 { // 10 minutes of probes, twice the quiet period, each seen failing
		before := e.tr.Counts().ProbeFailures[lost]
		e.step(10 * time.Second)
		e.waitFor(t, "the probe failing", func() bool { return e.tr.Counts().ProbeFailures[lost] > before })
	}
	if e.tr.Healthy(lost) {
		t.Fatal("a lost GPU recovered without answering")
	}
	if got := e.tr.Unhealthy(); len(got) != 1 {
		t.Errorf("unhealthy = %v, want only %s", got, lost)
	}
	if err := e.sim.Reset(lost); err != nil {
		t.Fatal(err)
	}
	start := e.clock.Now()
	for !e.tr.Healthy(lost) && e.clock.Since(start) < 10*time.Minute {
		e.step(10 * time.Second)
		time.Sleep(time.Millisecond)
	}
	e.waitFor(t, "the reset GPU healthy", func() bool { return e.tr.Healthy(lost) })
	if took := e.clock.Since(start); took < 5*time.Minute {
		t.Errorf("recovered %s after it answered, before the quiet period (5m)", took)
	}
	// the tracker says healthy before the loop saves it: wait for the save
	saved := func() [][]string {
		e.mu.Lock()
		defer e.mu.Unlock()
		out := make([][]string, 0, len(e.saved))
		for _, st := range e.saved {
			keys := make([]string, 0, len(st))
			for k := range st {
				keys = append(keys, k)
			}
			out = append(out, keys)
		}
		return out
	}
	e.waitFor(t, "the healthy state saved", func() bool { s := saved(); return len(s) > 0 && len(s[len(s)-1]) == 0 })
	if s := saved(); len(s) < 2 || len(s[0]) != 1 || len(s[len(s)-1]) != 0 {
		t.Errorf("saved states %v: want the GPU kept unhealthy first, none last", s)
	}
}

func TestRunSurvivesEventWaitErrors(t *testing.T) {
	e := startRun(t)
	e.sim.FailEventWaits(nvml.ERROR_UNKNOWN)
	e.waitFor(t, "a wait error counted", func() bool { return e.tr.Counts().EventWaitErrors > 0 })
	// The probes still watch the GPUs while the event set is down.
	if err := e.sim.FallOffBus(e.devs[2].UUID); err != nil {
		t.Fatal(err)
	}
	e.step(10 * time.Second)
	e.waitFor(t, "the lost GPU found by its probe", func() bool { return !e.tr.Healthy(e.devs[2].UUID) })
	// Events work again: the set is re-created after the backoff.
	e.sim.FailEventWaits(nvml.SUCCESS)
	for range 10 {
		e.clock.Step(time.Minute) // past any backoff
		time.Sleep(2 * time.Millisecond)
	}
	e.waitFor(t, "an Xid on the re-created event set", func() bool {
		_ = e.sim.InjectXID(e.devs[0].UUID, 31)
		return !e.tr.Healthy(e.devs[0].UUID)
	})
	if err := e.tr.Alive(e.clock.Now(), time.Minute); err != nil {
		t.Errorf("alive: %v", err)
	}
}

func TestAliveAndNVMLAnswered(t *testing.T) {
	tr := NewTracker(devices("GPU-a"), Options{}, nil, t0)
	if err := tr.Alive(t0, time.Minute); !errors.Is(err, ErrStalled) {
		t.Errorf("before the loops start: %v, want ErrStalled", err)
	}
	if err := tr.NVMLAnswered(t0, time.Minute); !errors.Is(err, ErrNVMLSilent) {
		t.Errorf("before any call: %v, want ErrNVMLSilent", err)
	}
	tr.beat(LoopEvents, t0, true)
	tr.beat(LoopProbes, t0, false)
	if err := tr.Alive(t0.Add(time.Minute), time.Minute); err != nil {
		t.Errorf("at the window's edge: %v", err)
	}
	if err := tr.Alive(t0.Add(time.Minute+time.Second), time.Minute); !errors.Is(err, ErrStalled) || !contains(err.Error(), LoopEvents) {
		t.Errorf("past the window: %v, want ErrStalled naming the loop", err)
	}
	if err := tr.NVMLAnswered(t0.Add(2*time.Minute), time.Minute); !errors.Is(err, ErrNVMLSilent) || !contains(err.Error(), "nvidia-smi") {
		t.Errorf("silent NVML: %v", err)
	}
}
