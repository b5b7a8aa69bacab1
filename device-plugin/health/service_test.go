package health

import (
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/gpu"
)

func TestServiceFailureAndRecovery(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	devs := []gpu.Device{{UUID: "GPU-a", MemoryMiB: 1}, {UUID: "GPU-b", MemoryMiB: 1}}
	tr := NewTracker(devs, Options{QuietPeriod: 5 * time.Minute}, nil, now)
	type step struct {
		name        string
		do          func() bool
		wantChanged bool
		wantBad     []string
		wantReasons map[string][]string
	}
	died := errors.New("MPS control daemon does not answer")
	steps := []step{
		{name: "a failing service makes its GPU unhealthy", do: func() bool { return tr.Service("GPU-a", "mps", died, now) },
			wantChanged: true, wantBad: []string{"GPU-a"}, wantReasons: map[string][]string{"GPU-a": {"mps: MPS control daemon does not answer"}}},
		{name: "the same failure again changes nothing", do: func() bool { return tr.Service("GPU-a", "mps", died, now.Add(time.Second)) },
			wantBad: []string{"GPU-a"}, wantReasons: map[string][]string{"GPU-a": {"mps: MPS control daemon does not answer"}}},
		{name: "a passing NVML probe does not heal a failing service", do: func() bool {
			tr.Probed("GPU-a", nil, now.Add(10*time.Minute))
			return len(tr.Tick(now.Add(20*time.Minute))) > 0
		}, wantBad: []string{"GPU-a"}, wantReasons: map[string][]string{"GPU-a": {"mps: MPS control daemon does not answer"}}},
		{name: "an unknown GPU is ignored", do: func() bool { return tr.Service("GPU-x", "mps", died, now) },
			wantBad: []string{"GPU-a"}, wantReasons: map[string][]string{"GPU-a": {"mps: MPS control daemon does not answer"}}},
		{name: "the service answers: healthy at once, no quiet period", do: func() bool { return tr.Service("GPU-a", "mps", nil, now.Add(21*time.Minute)) },
			wantChanged: true, wantBad: []string{}, wantReasons: map[string][]string{}},
		{name: "a critical Xid still holds the GPU after its service answers", do: func() bool {
			tr.Observe(gpu.Event{UUID: "GPU-b", XID: 79}, now.Add(22*time.Minute))
			tr.Service("GPU-b", "mps", died, now.Add(22*time.Minute))
			return tr.Service("GPU-b", "mps", nil, now.Add(23*time.Minute))
		}, wantChanged: true, wantBad: []string{"GPU-b"}, wantReasons: map[string][]string{"GPU-b": {"critical Xid"}}},
	}
	for _, s := range steps {
		if got := s.do(); got != s.wantChanged {
			t.Errorf("%s: changed = %v, want %v", s.name, got, s.wantChanged)
		}
		if d := cmp.Diff(s.wantBad, tr.Unhealthy()); d != "" {
			t.Errorf("%s: unhealthy (-want +got):\n%s", s.name, d)
		}
		if d := cmp.Diff(s.wantReasons, tr.Reasons()); d != "" {
			t.Errorf("%s: reasons (-want +got):\n%s", s.name, d)
		}
		if _, kept := tr.States()["GPU-a"]; kept {
			t.Errorf("%s: a service failure is in the kept state", s.name)
		}
	}
}
