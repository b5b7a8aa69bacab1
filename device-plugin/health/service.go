package health

import (
	"sort"
	"time"
)

// A service is something a GPU's tenants need besides the GPU itself, such
// as the MPS server of an MPS GPU. While a service of a GPU fails the GPU is
// unhealthy with the service's reason; when the service answers again the GPU
// is healthy at once (unless an Xid or a failed probe holds it), without the
// quiet period: the service's own check says it works again. Service state is
// not kept across restarts: the service's supervisor checks it again first.

// ServiceFailure is one failing service of a GPU.
type ServiceFailure struct {
	Since  time.Time
	Reason string
}

// Service records a check of the service name on GPU uuid (err nil: it
// answers). It reports whether the GPU's health or reason changed.
func (t *Tracker) Service(uuid, name string, err error, now time.Time) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.known(uuid) {
		return false
	}
	byName := t.services[uuid]
	old, was := byName[name]
	if err == nil {
		if !was {
			return false
		}
		delete(byName, name)
		if len(byName) == 0 {
			delete(t.services, uuid)
		}
		return true
	}
	reason := name + ": " + err.Error()
	if was && old.Reason == reason {
		return false
	}
	if byName == nil {
		byName = map[string]ServiceFailure{}
		t.services[uuid] = byName
	}
	since := now
	if was {
		since = old.Since
	}
	byName[name] = ServiceFailure{Since: since, Reason: reason}
	return true
}

// ServiceFailures returns a copy of the failing services, by GPU then name.
func (t *Tracker) ServiceFailures() map[string]map[string]ServiceFailure {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make(map[string]map[string]ServiceFailure, len(t.services))
	for u, byName := range t.services {
		out[u] = make(map[string]ServiceFailure, len(byName))
		for n, f := range byName {
			out[u][n] = f
		}
	}
	return out
}

// serviceReasons lists the reasons of uuid's failing services, sorted.
func (t *Tracker) serviceReasonsLocked(uuid string) []string {
	var out []string
	for _, f := range t.services[uuid] {
		out = append(out, f.Reason)
	}
	sort.Strings(out)
	return out
}
