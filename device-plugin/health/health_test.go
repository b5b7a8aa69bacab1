package health

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/gpu"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func TestTrackerXIDThenRecovery(t *testing.T) {
	tr := NewTracker([]string{"GPU-a", "GPU-b"}, []uint64{13, 31, 43, 45, 68, 109}, 5*time.Minute)
	steps := []struct {
		name      string
		event     *gpu.Event
		at        time.Duration
		changed   bool
		unhealthy []string
	}{
		{name: "application Xid 43 is ignored", event: &gpu.Event{UUID: "GPU-a", XID: 43}, unhealthy: []string{}},
		{name: "Xid 79 (fallen off the bus) → unhealthy", event: &gpu.Event{UUID: "GPU-a", XID: 79}, changed: true, unhealthy: []string{"GPU-a"}},
		{name: "unknown GPU is ignored", event: &gpu.Event{UUID: "GPU-z", XID: 79}, at: time.Minute, unhealthy: []string{"GPU-a"}},
		{name: "another Xid at 3m restarts the period", event: &gpu.Event{UUID: "GPU-a", XID: 48}, at: 3 * time.Minute, unhealthy: []string{"GPU-a"}},
		{name: "7m59s: only 4m59s quiet", at: 7*time.Minute + 59*time.Second, unhealthy: []string{"GPU-a"}},
		{name: "8m: 5m quiet → healthy", at: 8 * time.Minute, changed: true, unhealthy: []string{}},
		{name: "all-GPU event", event: &gpu.Event{XID: 79}, at: 9 * time.Minute, changed: true, unhealthy: []string{"GPU-a", "GPU-b"}},
	}
	for _, s := range steps {
		changed := false
		if s.event != nil {
			changed = tr.Observe(*s.event, t0.Add(s.at))
		}
		changed = tr.Tick(t0.Add(s.at)) || changed
		if changed != s.changed {
			t.Errorf("%s: changed = %v, want %v", s.name, changed, s.changed)
		}
		if d := cmp.Diff(s.unhealthy, tr.Unhealthy()); d != "" {
			t.Errorf("%s: unhealthy (-want +got):\n%s", s.name, d)
		}
	}
}

type fakeEvents struct{ ch chan gpu.Event }

func (f fakeEvents) Wait(ms uint32) (gpu.Event, error) {
	select {
	case e := <-f.ch:
		return e, nil
	case <-time.After(time.Duration(ms) * time.Millisecond):
		return gpu.Event{}, gpu.ErrTimeout
	}
}
func (f fakeEvents) Close() {}

func TestRunCallsOnChange(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(t0)
	tr := NewTracker([]string{"GPU-a"}, nil, time.Minute)
	ev := fakeEvents{ch: make(chan gpu.Event, 1)}
	changes := make(chan []string, 4)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error)
	go func() { done <- tr.Run(ctx, ev, clk, 5, func() { changes <- tr.Unhealthy() }) }()
	ev.ch <- gpu.Event{UUID: "GPU-a", XID: 79}
	if got := <-changes; len(got) != 1 {
		t.Fatalf("after Xid: unhealthy = %v", got)
	}
	clk.SetTime(t0.Add(time.Minute))
	if got := <-changes; len(got) != 0 {
		t.Fatalf("after recovery: unhealthy = %v", got)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
