package runner

import (
	"context"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// waitBound waits until want pods are bound, or Timeout after creation, or
// Stall without a new bind once binding has started; it returns the time of
// the last bind.
func (o Options) waitBound(ctx context.Context, b *bindLog, want int, created time.Time) time.Time {
	deadline := created.Add(o.Timeout)
	for {
		n, last := b.count(), b.last()
		stalled := false
		if !last.IsZero() {
			stalled = time.Since(maxTime(last, created)) > o.Stall
		}
		if n >= want || time.Now().After(deadline) || stalled || ctx.Err() != nil {
			return last
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// bindLog records when each pod was first seen bound.
type bindLog struct {
	mu    sync.Mutex
	at    map[string]time.Time
	lastT time.Time
}

func newBindLog() *bindLog { return &bindLog{at: map[string]time.Time{}} }

func (b *bindLog) see(obj any) {
	p, ok := obj.(*corev1.Pod)
	if !ok || p.Spec.NodeName == "" {
		return
	}
	now := time.Now()
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, seen := b.at[p.Name]; !seen {
		b.at[p.Name], b.lastT = now, now
	}
}

func (b *bindLog) count() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.at)
}

func (b *bindLog) last() time.Time {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.lastT
}
