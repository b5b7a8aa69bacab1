package reschedule

import (
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// forgetDoneAfter: how long a handled pod is remembered, so that a late
// informer event for it neither posts a second Event nor deletes again.
const forgetDoneAfter = time.Hour

// pendingSet keeps the queued pods, whether their Event was posted, and the
// pods already handled.
type pendingSet struct {
	mu        sync.Mutex
	pods      map[Target]*corev1.Pod
	announced map[Target]bool
	done      map[Target]time.Time
}

func newPendingSet() *pendingSet {
	return &pendingSet{pods: map[Target]*corev1.Pod{}, announced: map[Target]bool{}, done: map[Target]time.Time{}}
}

// add stores pod under t; it reports whether t is new (neither queued nor handled).
func (m *pendingSet) add(t Target, pod *corev1.Pod, now time.Time) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	for d, at := range m.done {
		if now.Sub(at) > forgetDoneAfter {
			delete(m.done, d)
		}
	}
	if _, ok := m.pods[t]; ok {
		return false
	}
	if _, ok := m.done[t]; ok {
		return false
	}
	m.pods[t] = pod
	return true
}

func (m *pendingSet) get(t Target) (*corev1.Pod, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	p, ok := m.pods[t]
	return p, ok
}

// announce reports whether t's Event is still to be posted, and marks it posted.
func (m *pendingSet) announce(t Target) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.announced[t] {
		return false
	}
	m.announced[t] = true
	return true
}

// finish moves t from queued to handled.
func (m *pendingSet) finish(t Target, now time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.pods, t)
	delete(m.announced, t)
	m.done[t] = now
}
