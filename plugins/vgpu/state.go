package vgpu

import (
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/volcano-vgpu/volcano-vgpu/api"
	"github.com/volcano-vgpu/volcano-vgpu/plugins/placement"
)

// podPlacement is the booking recorded on a pod: its assignment annotation,
// or, for a pod this scheduler bound moments ago whose annotated copy the
// informer has not delivered yet, the in-flight record.
func podPlacement(pod *corev1.Pod, cache *decodeCache, inflight *Inflight) (placement.Placement, bool, error) {
	if value, ok := pod.Annotations[api.AssignmentKey]; ok {
		pl, uid, err := cache.assignment(pod.UID, value)
		if a, newer := inflight.Newer(pod.UID, value); newer {
			// The pod carries something other than the decision in flight
			// (an annotation the pod was created with, or written by an older
			// scheduler whose bind never landed): the decision in flight is
			// the one being bound.
			return fromAssignment(a), true, nil
		}
		if err != nil {
			return placement.Placement{}, false, err
		}
		if string(pod.UID) != "" && uid != string(pod.UID) {
			// A copied annotation (pod created from another pod's manifest)
			// books nothing: the device plugin refuses it too.
			return placement.Placement{}, false, nil
		}
		inflight.Forget(pod.UID)
		return pl, true, nil
	}
	if a, ok := inflight.Get(pod.UID); ok {
		return fromAssignment(a), true, nil
	}
	return placement.Placement{}, false, nil
}

func terminated(pod *corev1.Pod) bool {
	return pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed
}

// Inflight remembers assignments from the moment their gang commits (the
// session goroutine dispatches the task) until the scheduler's cache shows
// them on the pod. The next session may open before the bind goroutine's
// Binding (which carries the assignment) lands, and Volcano opens it from its
// informer cache, which lags the Binding; without this a GPU booked by the
// previous session could look free and be booked twice.
// It lives as long as the scheduler process (created in main, passed to the
// plugin builder) and is the only state shared across sessions.
type Inflight struct {
	mu      sync.Mutex
	entries map[types.UID]inflightEntry
	now     func() time.Time
	ttl     time.Duration
}

type inflightEntry struct {
	a     api.Assignment
	value string // a, encoded as the Binding carries it
	added time.Time
}

// NewInflight returns an empty registry; entries older than ttl are dropped
// (by then the informer has long delivered the pod, or the pod is gone).
func NewInflight(now func() time.Time, ttl time.Duration) *Inflight {
	return &Inflight{entries: map[types.UID]inflightEntry{}, now: now, ttl: ttl}
}

// Put records an assignment committed for a pod, and its encoding, before
// the Binding carries it to the pod.
func (f *Inflight) Put(uid types.UID, a api.Assignment, value string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.entries[uid] = inflightEntry{a: a, value: value, added: f.now()}
}

// Newer returns the live assignment in flight for the pod when its
// annotation holds something else: an earlier decision, written by a bind
// that never landed.
func (f *Inflight) Newer(uid types.UID, annotation string) (api.Assignment, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	e, ok := f.entries[uid]
	if !ok || f.now().Sub(e.added) > f.ttl || e.value == annotation {
		return api.Assignment{}, false
	}
	return e.a, true
}

// Get returns a live entry.
func (f *Inflight) Get(uid types.UID) (api.Assignment, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	e, ok := f.entries[uid]
	if !ok || f.now().Sub(e.added) > f.ttl {
		return api.Assignment{}, false
	}
	return e.a, true
}

// Forget drops an entry (the pod now carries its annotation, or the bind failed).
func (f *Inflight) Forget(uid types.UID) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.entries, uid)
}

// Expire drops entries older than the TTL; called once per session.
func (f *Inflight) Expire() {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := f.now()
	for uid, e := range f.entries {
		if now.Sub(e.added) > f.ttl {
			delete(f.entries, uid)
		}
	}
}

// Len is the number of entries, for tests and metrics.
func (f *Inflight) Len() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.entries)
}
