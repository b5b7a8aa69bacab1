// Package usage keeps what the compute controller measured of each GPU and
// each of its tenants, for the metrics: the GPU's busy fraction, each
// tenant's attributed (achieved) share against its target, and whether the
// controller is holding it back. The device plugin hands every period's
// decisions to Tracker.Observe (from compute.Runner.Observe); a scrape reads
// the figures and prunes the tenants that are gone, so series of deleted
// pods disappear. It imports no NVML binding, so the metrics need none.
package usage

import (
	"math"
	"sync"
	"time"
)

// Sample is one tenant's period as the compute controller decided it
// (compute.Decision: Key, Share, Measured, Control.Mode == api.ControlLimited).
type Sample struct {
	Key      string
	Target   float64
	Measured float64
	Limited  bool
}

// Tau is the time constant of the averaged fractions: long enough to smooth
// NVML's once-a-second samples, short enough to follow a workload's phases.
const Tau = 2 * time.Second

// average is an exponentially weighted mean over the time it has been fed:
// its weights fade with Tau, and while it is younger than a few Tau it is
// the weighted mean of what it saw, not pulled toward a zero before it
// began (a container 3 s old at a steady 30% reads 30%, not 23%).
type average struct {
	sum, weight float64
}

// add feeds v over a period of dt seconds; a period of no length (the
// first observation) counts as a short one, so the mean starts at v.
func (a *average) add(v, dt float64) {
	w := 1 - math.Exp(-dt/Tau.Seconds())
	if w <= 0 {
		w = 1e-9
	}
	a.sum = a.sum*(1-w) + v*w
	a.weight = a.weight*(1-w) + w
}

func (a average) mean() float64 {
	if a.weight == 0 {
		return 0
	}
	return a.sum / a.weight
}

// GPU is one GPU's measured use.
type GPU struct {
	Busy        float64 // busy fraction, averaged over about Tau
	BusySeconds float64 // cumulative busy time measured
}

// Tenant is one container's measured use of one GPU.
type Tenant struct {
	Target      float64 // the controller's target share this period (balance: with lent capacity)
	Achieved    float64 // attributed busy fraction, averaged over about Tau
	BusySeconds float64 // cumulative busy time attributed
	Limited     bool    // the last decision admits launches only within an allowance
}

type key struct{ uuid, tenant string }

type gpuState struct {
	busy average
	GPU
}

type tenantState struct {
	achieved average
	Tenant
}

// Tracker accumulates the controller's observations. Safe for concurrent use.
type Tracker struct {
	now     func() time.Time
	mu      sync.Mutex
	last    map[string]time.Time // last observation per GPU
	gpus    map[string]*gpuState
	tenants map[key]*tenantState
}

// NewTracker returns an empty tracker reading the time from now.
func NewTracker(now func() time.Time) *Tracker {
	return &Tracker{now: now, last: map[string]time.Time{}, gpus: map[string]*gpuState{}, tenants: map[key]*tenantState{}}
}

// Observe records one control period of GPU uuid: busy is its busy fraction
// over the period, ds its tenants' samples. The period's length is the time since the
// GPU's previous observation (the controller's windows are contiguous); the
// first observation of a GPU starts the averages and accumulates no time.
// A tenant's average starts with its first period: a container that has run
// less than Tau reads the mean of its own periods.
func (t *Tracker) Observe(uuid string, busy float64, ds []Sample) {
	now := t.now()
	t.mu.Lock()
	defer t.mu.Unlock()
	prev, seen := t.last[uuid]
	t.last[uuid] = now
	dt := 0.0
	if seen {
		dt = max(now.Sub(prev).Seconds(), 0)
	}
	g := t.gpus[uuid]
	if g == nil {
		g = &gpuState{}
		t.gpus[uuid] = g
	}
	busy = clamp(busy)
	g.busy.add(busy, dt)
	g.Busy = g.busy.mean()
	g.BusySeconds += busy * dt
	for _, d := range ds {
		k := key{uuid, d.Key}
		s := t.tenants[k]
		if s == nil {
			s = &tenantState{}
			t.tenants[k] = s
		}
		m := clamp(d.Measured)
		s.achieved.add(m, dt)
		s.Achieved = s.achieved.mean()
		s.BusySeconds += m * dt
		s.Target = d.Target
		s.Limited = d.Limited
	}
}

func clamp(f float64) float64 {
	if math.IsNaN(f) {
		return 0
	}
	return min(max(f, 0), 1)
}

// GPU returns what was measured of GPU uuid.
func (t *Tracker) GPU(uuid string) (GPU, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	g, ok := t.gpus[uuid]
	if !ok {
		return GPU{}, false
	}
	return g.GPU, true
}

// Tenant returns what was measured of tenant (compute.Tenant.Key) on GPU uuid.
func (t *Tracker) Tenant(uuid, tenant string) (Tenant, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s, ok := t.tenants[key{uuid, tenant}]
	if !ok {
		return Tenant{}, false
	}
	return s.Tenant, true
}

// Keep forgets every GPU and tenant that live does not name (live reports
// whether a tenant key on a GPU is still allocated; tenant "" asks about the
// GPU itself).
func (t *Tracker) Keep(live func(uuid, tenant string) bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for k := range t.tenants {
		if !live(k.uuid, k.tenant) {
			delete(t.tenants, k)
		}
	}
	for u := range t.gpus {
		if !live(u, "") {
			delete(t.gpus, u)
			delete(t.last, u)
		}
	}
}
