package memguard

import (
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2/ktesting"
	testclock "k8s.io/utils/clock/testing"
)

// unlimitedEnv: GPU-0 with a 30% container (u1), a container with the whole
// GPU (u2, no throttle), and a process that holds more than u1's cap.
func unlimitedEnv(limited map[uint32]bool, mapsErr map[uint32]error, kill bool) *env {
	e := &env{src: &fakeSource{procs: map[string][]Process{}}, rec: record.NewFakeRecorder(20), m: NewMetrics(nil),
		clock: testclock.NewFakeClock(time.Unix(1e9, 0))}
	e.owners = map[uint32]string{10: "u1/main", 11: "u1/main", 12: "u1/main", 20: "u2/main"}
	tenants := []Tenant{
		{Key: "u1/main", PodUID: "u1", Namespace: "ns", Pod: "p1", Container: "main", UUID: "GPU-0", Model: "NVIDIA H100 80GB HBM3", CapMiB: 1000, Compute: true, Cores: 30},
		{Key: "u2/main", PodUID: "u2", Namespace: "ns", Pod: "p2", Container: "main", UUID: "GPU-0", Model: "NVIDIA H100 80GB HBM3", CapMiB: 1000, Cores: 100},
	}
	e.r = &Runner{Source: e.src, List: func() []Tenant { return tenants },
		Owners: func(pid uint32) (string, bool) { k, ok := e.owners[pid]; return k, ok },
		Policy: Policy{ToleranceMiB: 10}, Period: time.Second, Clock: e.clock, Recorder: e.rec, Metrics: e.m,
		Kill:          func(pid uint32) error { e.killed = append(e.killed, pid); return e.kill },
		KillUnlimited: kill,
		Limited: func(pid uint32) (bool, error) {
			if err := mapsErr[pid]; err != nil {
				return false, err
			}
			return limited[pid], nil
		}}
	return e
}

func drain(rec *record.FakeRecorder) []string {
	var out []string
	for {
		select {
		case ev := <-rec.Events:
			out = append(out, ev)
		default:
			return out
		}
	}
}

func TestUnlimitedProcesses(t *testing.T) {
	eperm := fmt.Errorf("pid 11: open /proc/11/maps: %w", fs.ErrPermission)
	for _, tc := range []struct {
		name       string
		procs      []Process
		limited    map[uint32]bool
		mapsErr    map[uint32]error
		kill       bool
		wantPIDs   []uint32 // found without the limiter
		wantKilled []uint32
		wantEvents []string // substrings, one per event
		wantGauge  float64  // u1's unlimited processes after the tick
		wantErrors float64  // maps errors counted
	}{
		{name: "every process with the limiter", procs: []Process{{PID: 10, UsedBytes: 100 * MiB}, {PID: 20, UsedBytes: 100 * MiB}},
			limited: map[uint32]bool{10: true}},
		{name: "one without: reported", procs: []Process{{PID: 10, UsedBytes: 100 * MiB}, {PID: 11, UsedBytes: 100 * MiB}},
			limited: map[uint32]bool{10: true}, wantPIDs: []uint32{11}, wantGauge: 1,
			wantEvents: []string{"Warning GPULimiterBypassed Process 11 (host pid) of container main runs on GPU GPU-0 (index 0) without libvcuda.so, so its compute share (30% of the GPU) is not enforced"}},
		{name: "one without: killed", procs: []Process{{PID: 10, UsedBytes: 100 * MiB}, {PID: 11, UsedBytes: 100 * MiB}},
			limited: map[uint32]bool{10: true}, kill: true, wantPIDs: []uint32{11}, wantKilled: []uint32{11},
			wantEvents: []string{"Warning GPULimiterBypassed Killed process 11 (host pid) of container main: it ran on GPU GPU-0 (index 0) without libvcuda.so"}},
		{name: "a container with the whole GPU has no share to take", procs: []Process{{PID: 20, UsedBytes: 100 * MiB}}, kill: true},
		{name: "a process in no container is left alone", procs: []Process{{PID: 99, UsedBytes: 100 * MiB}}, kill: true},
		{name: "killed for its memory first, not again", procs: []Process{{PID: 10, UsedBytes: 100 * MiB}, {PID: 11, UsedBytes: 2000 * MiB}},
			limited: map[uint32]bool{10: true}, kill: true, wantKilled: []uint32{11},
			wantEvents: []string{"Warning GPUMemoryCapExceeded Killed process 11"}},
		{name: "a map that cannot be read: counted, nothing done", procs: []Process{{PID: 10, UsedBytes: 100 * MiB}, {PID: 11, UsedBytes: 100 * MiB}},
			limited: map[uint32]bool{10: true}, mapsErr: map[uint32]error{11: eperm}, kill: true, wantErrors: 1},
		{name: "a process that ended since NVML listed it", procs: []Process{{PID: 11, UsedBytes: 100 * MiB}},
			mapsErr: map[uint32]error{11: fmt.Errorf("pid 11: %w", fs.ErrNotExist)}, kill: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			e := unlimitedEnv(tc.limited, tc.mapsErr, tc.kill)
			e.src.procs["GPU-0"] = tc.procs
			_, found := e.r.TickAll(ctx)
			var pids []uint32
			for _, u := range found {
				pids = append(pids, u.PID)
			}
			if diff := cmp.Diff(tc.wantPIDs, pids); diff != "" {
				t.Errorf("found without the limiter (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantKilled, e.killed); diff != "" {
				t.Errorf("killed (-want +got):\n%s", diff)
			}
			evs := drain(e.rec)
			if len(evs) != len(tc.wantEvents) {
				t.Fatalf("events %q, want %d", evs, len(tc.wantEvents))
			}
			for i, want := range tc.wantEvents {
				if !strings.HasPrefix(evs[i], want) {
					t.Errorf("event %q: want it to start %q", evs[i], want)
				}
			}
			lv := []string{"ns", "p1", "main", "GPU-0", "0", "NVIDIA H100 80GB HBM3"}
			if got := testutil.ToFloat64(e.m.Unlimited.WithLabelValues(lv...)); got != tc.wantGauge {
				t.Errorf("unlimited gauge = %v, want %v", got, tc.wantGauge)
			}
			if got := testutil.ToFloat64(e.m.Errors.WithLabelValues("GPU-0", "maps")); got != tc.wantErrors {
				t.Errorf("maps errors = %v, want %v", got, tc.wantErrors)
			}
			wantKills := 0.0
			if tc.kill && len(tc.wantPIDs) > 0 {
				wantKills = 1
			}
			if got := testutil.ToFloat64(e.m.UnlimitedKills.WithLabelValues(lv...)); got != wantKills {
				t.Errorf("unlimited kills = %v, want %v", got, wantKills)
			}
		})
	}
}

// TestUnlimitedReportedOnce: a process found without the limiter is
// reported once while it runs (the gauge counts it every period); a new
// process of the same pid after it ended is reported again.
func TestUnlimitedReportedOnce(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	e := unlimitedEnv(map[uint32]bool{10: true}, nil, false)
	lv := []string{"ns", "p1", "main", "GPU-0", "0", "NVIDIA H100 80GB HBM3"}
	both := []Process{{PID: 10, UsedBytes: 100 * MiB}, {PID: 11, UsedBytes: 100 * MiB}}
	for i, step := range []struct {
		procs      []Process
		wantEvents int
		wantGauge  float64
	}{
		{both, 1, 1},
		{both, 0, 1},
		{both[:1], 0, 0}, // 11 ended
		{both, 1, 1},     // a new process 11
	} {
		e.src.procs["GPU-0"] = step.procs
		e.r.TickAll(ctx)
		if got := len(drain(e.rec)); got != step.wantEvents {
			t.Errorf("period %d: %d events, want %d", i, got, step.wantEvents)
		}
		if got := testutil.ToFloat64(e.m.Unlimited.WithLabelValues(lv...)); got != step.wantGauge {
			t.Errorf("period %d: gauge %v, want %v", i, got, step.wantGauge)
		}
	}
}

// TestUnlimitedKillFailed: a kill the kernel refuses is counted and the
// process is reported again next period; one that already ended is not an error.
func TestUnlimitedKillFailed(t *testing.T) {
	for _, tc := range []struct {
		name       string
		err        error
		wantErrors float64
	}{
		{"refused", syscall.EPERM, 1},
		{"already gone", syscall.ESRCH, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			e := unlimitedEnv(map[uint32]bool{10: true}, nil, true)
			e.kill = tc.err
			e.src.procs["GPU-0"] = []Process{{PID: 10, UsedBytes: 100 * MiB}, {PID: 11, UsedBytes: 100 * MiB}}
			_, found := e.r.TickAll(ctx)
			if len(found) != 1 || found[0].Killed {
				t.Errorf("found %+v, want process 11 not killed", found)
			}
			if got := testutil.ToFloat64(e.m.Errors.WithLabelValues("GPU-0", "kill")); got != tc.wantErrors {
				t.Errorf("kill errors = %v, want %v", got, tc.wantErrors)
			}
			if evs := drain(e.rec); len(evs) != 0 {
				t.Errorf("events %q, want none (nothing was killed)", evs)
			}
			if !errors.Is(tc.err, syscall.ESRCH) && testutil.ToFloat64(e.m.Unlimited.WithLabelValues("ns", "p1", "main", "GPU-0", "0", "NVIDIA H100 80GB HBM3")) != 1 {
				t.Errorf("a process the guard could not kill must still count as unlimited")
			}
		})
	}
}
