package health

import (
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/gpu"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

var errLost = errors.New("ERROR_GPU_IS_LOST")

func devices(uuids ...string) []gpu.Device {
	out := make([]gpu.Device, len(uuids))
	for i, u := range uuids {
		out[i] = gpu.Device{Index: i, UUID: u, Model: "A100", MemoryMiB: 40960}
	}
	return out
}

// step is one thing that happens to the tracker at t0+at.
type step struct {
	name      string
	at        time.Duration
	event     *gpu.Event
	probe     map[string]error // UUID → probe result (nil: passes)
	unhealthy []string
}

func run(t *testing.T, tr *Tracker, steps []step) {
	t.Helper()
	for _, s := range steps {
		now := t0.Add(s.at)
		if s.event != nil {
			tr.Observe(*s.event, now)
		}
		for u, err := range s.probe {
			tr.Probed(u, err, now)
		}
		tr.Tick(now)
		if d := cmp.Diff(s.unhealthy, tr.Unhealthy()); d != "" {
			t.Errorf("%s: unhealthy (-want +got):\n%s", s.name, d)
		}
	}
}

func TestRecoveryNeedsAProbeAndTheQuietPeriod(t *testing.T) {
	tests := []struct {
		name  string
		steps []step
	}{{
		name: "Xid 79 with a failing probe stays unhealthy long past the quiet period",
		steps: []step{
			{name: "Xid 79", event: &gpu.Event{UUID: "GPU-a", XID: 79}, probe: map[string]error{"GPU-a": errLost}, unhealthy: []string{"GPU-a"}},
			{name: "5m: quiet period since the Xid, probe fails", at: 5 * time.Minute, probe: map[string]error{"GPU-a": errLost}, unhealthy: []string{"GPU-a"}},
			{name: "2h: no probe since", at: 2 * time.Hour, unhealthy: []string{"GPU-a"}},
			{name: "3h: still lost", at: 3 * time.Hour, probe: map[string]error{"GPU-a": errLost}, unhealthy: []string{"GPU-a"}},
		},
	}, {
		name: "probe passing recovers once the quiet period since the last bad signal passed",
		steps: []step{
			{name: "Xid 48", event: &gpu.Event{UUID: "GPU-a", XID: 48}, unhealthy: []string{"GPU-a"}},
			{name: "1m: probe fails (remap pending)", at: time.Minute, probe: map[string]error{"GPU-a": errLost}, unhealthy: []string{"GPU-a"}},
			{name: "2m: probe passes, 1m quiet", at: 2 * time.Minute, probe: map[string]error{"GPU-a": nil}, unhealthy: []string{"GPU-a"}},
			{name: "5m59s: 4m59s quiet since the failed probe", at: 5*time.Minute + 59*time.Second, unhealthy: []string{"GPU-a"}},
			{name: "6m: 5m quiet, probed after the last failure → healthy", at: 6 * time.Minute, unhealthy: []string{}},
		},
	}, {
		name: "a probe passing before the Xid does not count",
		steps: []step{
			{name: "probe passes", probe: map[string]error{"GPU-a": nil}, unhealthy: []string{}},
			{name: "Xid 79", at: time.Second, event: &gpu.Event{UUID: "GPU-a", XID: 79}, unhealthy: []string{"GPU-a"}},
			{name: "10m, no probe since the Xid", at: 10 * time.Minute, unhealthy: []string{"GPU-a"}},
			{name: "11m, probe passes", at: 11 * time.Minute, probe: map[string]error{"GPU-a": nil}, unhealthy: []string{}},
		},
	}, {
		name: "ignored, unknown and all-GPU events",
		steps: []step{
			{name: "application Xid 43 is ignored", event: &gpu.Event{UUID: "GPU-a", XID: 43}, unhealthy: []string{}},
			{name: "an unknown GPU is ignored", event: &gpu.Event{UUID: "GPU-z", XID: 79}, unhealthy: []string{}},
			{name: "an event for every GPU", event: &gpu.Event{XID: 79}, unhealthy: []string{"GPU-a", "GPU-b"}},
		},
	}, {
		name: "a healthy GPU whose probe fails is unhealthy without any Xid",
		steps: []step{
			{name: "probe fails", probe: map[string]error{"GPU-b": errLost, "GPU-a": nil}, unhealthy: []string{"GPU-b"}},
		},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tr := NewTracker(devices("GPU-a", "GPU-b"), Options{IgnoredXIDs: []uint64{13, 31, 43, 45, 68, 109}, QuietPeriod: 5 * time.Minute}, nil, t0)
			run(t, tr, tc.steps)
		})
	}
}

func TestStartState(t *testing.T) {
	kept := map[string]Unhealthy{"GPU-a": {Since: t0.Add(-time.Hour), LastBad: t0.Add(-time.Hour), XID: 79, Reason: "critical Xid"}}
	devs := devices("GPU-a", "GPU-b", "GPU-c")
	devs[1].Failure = "memory info: ERROR_GPU_IS_LOST" // described from the kept state: may recover
	devs[2].Failure, devs[2].MemoryMiB = "memory info: ERROR_UNKNOWN", 0
	tr := NewTracker(devs, Options{QuietPeriod: 5 * time.Minute}, kept, t0)
	run(t, tr, []step{
		{name: "unhealthy before the restart, and both failed discoveries", unhealthy: []string{"GPU-a", "GPU-b", "GPU-c"}},
		{name: "probes pass: GPU-a, quiet for an hour, recovers at once", at: time.Second, probe: map[string]error{"GPU-a": nil, "GPU-b": nil, "GPU-c": nil}, unhealthy: []string{"GPU-b", "GPU-c"}},
		{name: "5m after the start GPU-b recovers; GPU-c, with no memory known, never", at: 6 * time.Minute, probe: map[string]error{"GPU-b": nil, "GPU-c": nil}, unhealthy: []string{"GPU-c"}},
	})
	if got := tr.States()["GPU-c"]; !got.Pinned || got.Reason != "discovery: memory info: ERROR_UNKNOWN" {
		t.Errorf("GPU-c state = %+v, want pinned with the discovery failure", got)
	}
}
