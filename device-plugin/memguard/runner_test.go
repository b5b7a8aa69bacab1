package memguard

import (
	"context"
	"errors"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2/ktesting"
	testclock "k8s.io/utils/clock/testing"
)

// fakeSource is a GPU's processes, changed by the test.
type fakeSource struct {
	mu    sync.Mutex
	procs map[string][]Process
	err   error
	calls int
}

func (f *fakeSource) Running(uuid string) ([]Process, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	return f.procs[uuid], f.err
}

func (f *fakeSource) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls
}

type env struct {
	src    *fakeSource
	owners map[uint32]string
	killed []uint32
	kill   error
	rec    *record.FakeRecorder
	m      *Metrics
	r      *Runner
	clock  *testclock.FakeClock
}

func newEnv() *env {
	e := &env{src: &fakeSource{procs: map[string][]Process{}}, owners: map[uint32]string{}, rec: record.NewFakeRecorder(10), m: NewMetrics(nil),
		clock: testclock.NewFakeClock(time.Unix(1e9, 0))}
	tenants := []Tenant{
		{Key: "u1/main", PodUID: "u1", Namespace: "ns", Pod: "p1", Container: "main", UUID: "GPU-0", Index: 0, Model: "NVIDIA H100 80GB HBM3", CapMiB: 1000},
		{Key: "u2/main", PodUID: "u2", Namespace: "ns", Pod: "p2", Container: "main", UUID: "GPU-1", Index: 1, Model: "NVIDIA H100 80GB HBM3", CapMiB: 1000},
	}
	e.r = &Runner{Source: e.src, List: func() []Tenant { return tenants },
		Owners: func(pid uint32) (string, bool) { k, ok := e.owners[pid]; return k, ok },
		Policy: Policy{ToleranceMiB: 10}, Period: time.Second, Clock: e.clock, Recorder: e.rec, Metrics: e.m,
		Kill: func(pid uint32) error {
			if e.kill != nil {
				return e.kill
			}
			e.killed = append(e.killed, pid)
			return nil
		}}
	return e
}

func TestRunnerTick(t *testing.T) {
	for _, tc := range []struct {
		name       string
		procs      map[string][]Process
		owners     map[uint32]string
		ownerAfter map[uint32]string // owners when the guard checks again before killing
		nvmlErr    error
		killErr    error
		wantKilled []uint32
		wantEvents int
		wantKills  float64 // counter of u1 on GPU-0
		wantErrors map[string]float64
	}{
		{name: "over its cap: killed, Event, counted", // 600 + 500 > 1000 + 10
			procs:  map[string][]Process{"GPU-0": {proc(7, 600), proc(8, 500)}},
			owners: map[uint32]string{7: "u1/main", 8: "u1/main"}, wantKilled: []uint32{7}, wantEvents: 1, wantKills: 1},
		{name: "within its cap", procs: map[string][]Process{"GPU-0": {proc(7, 1000)}}, owners: map[uint32]string{7: "u1/main"}},
		{name: "the pid left the container before the kill (reused): spared",
			procs: map[string][]Process{"GPU-0": {proc(7, 2000)}}, owners: map[uint32]string{7: "u1/main"}, ownerAfter: map[uint32]string{}},
		{name: "already gone when signalled: nothing counted", procs: map[string][]Process{"GPU-0": {proc(7, 2000)}},
			owners: map[uint32]string{7: "u1/main"}, killErr: syscall.ESRCH},
		{name: "not allowed to signal: an error counted", procs: map[string][]Process{"GPU-0": {proc(7, 2000)}},
			owners: map[uint32]string{7: "u1/main"}, killErr: syscall.EPERM, wantErrors: map[string]float64{"GPU-0/kill": 1}},
		{name: "NVML fails: each GPU counted, nothing killed", nvmlErr: errors.New("boom"),
			wantErrors: map[string]float64{"GPU-0/nvml": 1, "GPU-1/nvml": 1}},
		{name: "a process of no tenant: left alone", procs: map[string][]Process{"GPU-0": {proc(99, 50000)}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv()
			e.src.procs, e.src.err, e.owners, e.kill = tc.procs, tc.nvmlErr, tc.owners, tc.killErr
			if tc.ownerAfter != nil {
				first := true
				owners := tc.owners
				e.r.Owners = func(pid uint32) (string, bool) {
					// Decide asks once per process; the recheck comes after.
					if first {
						first = false
						k, ok := owners[pid]
						return k, ok
					}
					k, ok := tc.ownerAfter[pid]
					return k, ok
				}
			}
			_, ctx := ktesting.NewTestContext(t)
			e.r.Tick(ctx)
			if diff := cmp.Diff(tc.wantKilled, e.killed); diff != "" {
				t.Errorf("killed (-want +got):\n%s", diff)
			}
			if got := len(e.rec.Events); got != tc.wantEvents {
				t.Errorf("%d Events, want %d", got, tc.wantEvents)
			}
			if got := testutil.ToFloat64(e.m.Kills.WithLabelValues("ns", "p1", "main", "GPU-0", "0", "NVIDIA H100 80GB HBM3")); got != tc.wantKills {
				t.Errorf("kills counter = %v, want %v", got, tc.wantKills)
			}
			got := map[string]float64{}
			for _, k := range []string{"GPU-0/nvml", "GPU-1/nvml", "GPU-0/kill"} {
				uuid, what, _ := strings.Cut(k, "/")
				if v := testutil.ToFloat64(e.m.Errors.WithLabelValues(uuid, what)); v != 0 {
					got[k] = v
				}
			}
			if diff := cmp.Diff(tc.wantErrors, got, cmpEmptyMap); diff != "" {
				t.Errorf("errors (-want +got):\n%s", diff)
			}
		})
	}
}

var cmpEmptyMap = cmp.FilterValues(func(a, b map[string]float64) bool { return len(a) == 0 && len(b) == 0 }, cmp.Ignore())

func TestRunnerEvent(t *testing.T) {
	e := newEnv()
	e.src.procs = map[string][]Process{"GPU-0": {proc(7, 1500)}}
	e.owners = map[uint32]string{7: "u1/main"}
	_, ctx := ktesting.NewTestContext(t)
	e.r.Tick(ctx)
	want := "Warning GPUMemoryCapExceeded Killed process 7 (host pid) of container main: the container held 1500 MiB on GPU GPU-0 (index 0), " +
		"over its cap of 1000 MiB (limit 1010 MiB with its 1 processes' contexts and the tolerance); the process held 1500 MiB"
	select {
	case got := <-e.rec.Events:
		if got != want {
			t.Errorf("Event:\n got %q\nwant %q", got, want)
		}
	default:
		t.Fatal("no Event")
	}
	if got := testutil.ToFloat64(e.m.Held.WithLabelValues("ns", "p1", "main", "GPU-0", "0", "NVIDIA H100 80GB HBM3")); got != 1500*MiB {
		t.Errorf("held gauge = %v MiB, want 1500", got/MiB)
	}
}

// TestRunnerPeriod: Run checks at once, then once per period of its clock.
func TestRunnerPeriod(t *testing.T) {
	e := newEnv()
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error)
	go func() { done <- e.r.Run(ctx) }()
	waitFor := func(n int) {
		t.Helper()
		for i := 0; i < 5000 && e.src.count() < n; i++ {
			time.Sleep(time.Millisecond)
		}
		if got := e.src.count(); got != n {
			t.Fatalf("%d NVML reads, want %d", got, n)
		}
	}
	waitFor(2) // both GPUs at start
	for !e.clock.HasWaiters() {
		time.Sleep(time.Millisecond)
	}
	e.clock.Step(time.Second)
	waitFor(4)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := (&Runner{}).Run(ctx); err == nil || !strings.Contains(err.Error(), "memoryGuard.period") {
		t.Errorf("Run without a period: %v, want an error naming memoryGuard.period", err)
	}
}
