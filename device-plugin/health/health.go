// Package health turns NVML Xid events into GPU health: a critical Xid
// (any not in the ignore list) makes a GPU unhealthy; a GPU with no
// critical Xid for the recovery period is healthy again.
package health

import (
	"context"
	"errors"
	"sort"
	"sync"
	"time"

	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/gpu"
)

// Tracker is the health state machine; it is safe for concurrent use.
type Tracker struct {
	ignored  map[uint64]bool
	recovery time.Duration
	uuids    []string

	mu   sync.Mutex
	last map[string]time.Time // UUID → time of its last critical Xid, while unhealthy
}

// NewTracker tracks the given GPUs, all healthy at first.
func NewTracker(uuids []string, ignored []uint64, recovery time.Duration) *Tracker {
	t := &Tracker{ignored: map[uint64]bool{}, recovery: recovery, uuids: append([]string(nil), uuids...), last: map[string]time.Time{}}
	for _, x := range ignored {
		t.ignored[x] = true
	}
	return t
}

// Observe applies an event; it reports whether any GPU's health changed.
func (t *Tracker) Observe(ev gpu.Event, now time.Time) bool {
	if t.ignored[ev.XID] {
		return false
	}
	targets := []string{ev.UUID}
	if ev.UUID == "" {
		targets = t.uuids
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	changed := false
	for _, u := range targets {
		if !t.known(u) {
			continue
		}
		if _, was := t.last[u]; !was {
			changed = true
		}
		t.last[u] = now
	}
	return changed
}

func (t *Tracker) known(u string) bool {
	for _, x := range t.uuids {
		if x == u {
			return true
		}
	}
	return false
}

// Tick recovers GPUs whose last critical Xid is older than the recovery
// period; it reports whether any GPU's health changed.
func (t *Tracker) Tick(now time.Time) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	changed := false
	for u, at := range t.last {
		if now.Sub(at) >= t.recovery {
			delete(t.last, u)
			changed = true
		}
	}
	return changed
}

// Healthy reports a GPU's health.
func (t *Tracker) Healthy(uuid string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	_, bad := t.last[uuid]
	return !bad
}

// Unhealthy lists the unhealthy GPUs, sorted.
func (t *Tracker) Unhealthy() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]string, 0, len(t.last))
	for u := range t.last {
		out = append(out, u)
	}
	sort.Strings(out)
	return out
}

// Run reads events until ctx ends, calling onChange after every change.
// pollMs bounds how long one NVML wait blocks (and how late a recovery is
// noticed); 0 means 1000.
func (t *Tracker) Run(ctx context.Context, events gpu.Events, clk clock.PassiveClock, pollMs uint32, onChange func()) error {
	logger := klog.FromContext(ctx)
	if pollMs == 0 {
		pollMs = 1000
	}
	defer events.Close()
	for ctx.Err() == nil {
		ev, err := events.Wait(pollMs)
		changed := false
		switch {
		case err == nil:
			if t.ignored[ev.XID] {
				logger.V(4).Info("Ignoring application Xid", "gpu", ev.UUID, "xid", ev.XID)
				break
			}
			changed = t.Observe(ev, clk.Now())
			logger.Info("GPU reported a critical Xid; marking it unhealthy", "gpu", ev.UUID, "xid", ev.XID, "recoveryPeriod", t.recovery)
		case errors.Is(err, gpu.ErrTimeout):
		default:
			return err
		}
		if t.Tick(clk.Now()) {
			logger.Info("GPU health recovered after the recovery period without critical Xids", "unhealthy", t.Unhealthy())
			changed = true
		}
		if changed {
			onChange()
		}
	}
	return nil
}
