// Package health keeps each GPU's health. A critical Xid (any not ignored)
// or a failed probe makes a GPU unhealthy; it is healthy again only when a
// probe through NVML passes after its last bad signal and no bad signal came
// for the quiet period. A GPU that never answers again stays unhealthy. The
// state survives restarts (state.go); the loops that feed it are in run.go.
//
// Which Xids need the probe: all critical ones. The Xids after which NVIDIA's
// Xid catalog asks for a GPU reset or a node reboot (48 double-bit ECC, 62
// and 119/120 firmware/GSP hangs, 64 and 95 ECC containment failures, 74
// NVLink, 79 fallen off the bus, 140 unrecovered ECC) leave the GPU either
// not answering NVML (lost: ERROR_GPU_IS_LOST) or with a row remapping
// pending, and the probe fails on both until the reset; after the others
// (such as 92 or 94) the probe passes and the quiet period decides. The
// application Xids (13, 31, 43, 45, 68, 109 by default) say nothing about
// the GPU and are ignored.
package health

import (
	"maps"
	"sort"
	"sync"
	"time"

	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/gpu"
)

// Unhealthy is why and since when a GPU is unhealthy.
type Unhealthy struct {
	Since   time.Time // when it became unhealthy
	LastBad time.Time // its last critical Xid or failed probe
	XID     uint64    // its last critical Xid, 0 if none
	Reason  string
	// Pinned: NVML could not describe the GPU at discovery, so it cannot be
	// offered in this run whatever its probe says (a restart rediscovers it).
	Pinned bool
}

// Options configure a Tracker.
type Options struct {
	IgnoredXIDs []uint64
	// QuietPeriod: how long after its last bad signal a GPU whose probe
	// passes is healthy again.
	QuietPeriod time.Duration
}

// Tracker is the health state machine; it is safe for concurrent use.
type Tracker struct {
	ignored map[uint64]bool
	quiet   time.Duration
	uuids   []string

	mu       sync.Mutex
	bad      map[string]Unhealthy
	probedOK map[string]time.Time // UUID → its last passing probe
	counts   Counts
	lastNVML time.Time // last NVML call that answered
	beats    map[string]time.Time
	services map[string]map[string]ServiceFailure // UUID → service → failure (service.go)
}

// Counts are the tracker's counters, for metrics.
type Counts struct {
	EventWaitErrors uint64
	ProbeFailures   map[string]uint64 // by UUID
}

// NewTracker tracks devs. kept is the state of an earlier run: a GPU
// unhealthy then stays unhealthy until its probe passes. A device whose
// discovery failed is unhealthy, pinned when its memory is unknown.
func NewTracker(devs []gpu.Device, o Options, kept map[string]Unhealthy, now time.Time) *Tracker {
	t := &Tracker{ignored: map[uint64]bool{}, quiet: o.QuietPeriod, bad: map[string]Unhealthy{},
		probedOK: map[string]time.Time{}, counts: Counts{ProbeFailures: map[string]uint64{}}, beats: map[string]time.Time{},
		services: map[string]map[string]ServiceFailure{}}
	for _, x := range o.IgnoredXIDs {
		t.ignored[x] = true
	}
	for _, d := range devs {
		t.uuids = append(t.uuids, d.UUID)
		if u, ok := kept[d.UUID]; ok {
			u.Pinned = false
			t.bad[d.UUID] = u
		}
		if d.Failure != "" {
			u := Unhealthy{Since: now, LastBad: now, Reason: "discovery: " + d.Failure, Pinned: d.MemoryMiB <= 0}
			if old, ok := t.bad[d.UUID]; ok {
				u.Since, u.XID = old.Since, old.XID
			}
			t.bad[d.UUID] = u
		}
	}
	return t
}

// Ignored reports whether an Xid is an application error.
func (t *Tracker) Ignored(xid uint64) bool { return t.ignored[xid] }

// Observe applies an event; it reports whether any GPU's health changed
// (a GPU became unhealthy, or its reason changed).
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
	t.lastNVML = now
	changed := false
	for _, u := range targets {
		if !t.known(u) {
			continue
		}
		changed = t.markLocked(u, now, ev.XID, "critical Xid") || changed
	}
	return changed
}

// Probed records a probe of one GPU; a failure makes it unhealthy. It
// reports whether the GPU's health changed.
func (t *Tracker) Probed(uuid string, err error, now time.Time) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.known(uuid) {
		return false
	}
	if err == nil {
		t.probedOK[uuid] = now
		t.lastNVML = now
		return false
	}
	t.counts.ProbeFailures[uuid]++
	return t.markLocked(uuid, now, 0, "probe: "+err.Error())
}

func (t *Tracker) markLocked(uuid string, now time.Time, xid uint64, reason string) bool {
	u, was := t.bad[uuid]
	if !was {
		u.Since = now
	}
	changed := !was || u.Reason != reason || xid != 0 && u.XID != xid
	u.LastBad, u.Reason = now, reason
	if xid != 0 {
		u.XID = xid
	}
	t.bad[uuid] = u
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

// Tick recovers the GPUs whose probe passed after their last bad signal and
// whose last bad signal is at least the quiet period old; it returns them.
func (t *Tracker) Tick(now time.Time) []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []string
	for u, s := range t.bad {
		ok, probed := t.probedOK[u]
		if s.Pinned || !probed || !ok.After(s.LastBad) || now.Sub(s.LastBad) < t.quiet {
			continue
		}
		delete(t.bad, u)
		out = append(out, u)
	}
	sort.Strings(out)
	return out
}

// Healthy reports a GPU's health: no Xid or failed probe holds it and
// none of its services fails.
func (t *Tracker) Healthy(uuid string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	_, bad := t.bad[uuid]
	return !bad && len(t.services[uuid]) == 0
}

// Unhealthy lists the unhealthy GPUs (services included), sorted.
func (t *Tracker) Unhealthy() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]string, 0, len(t.bad)+len(t.services))
	for u := range t.bad {
		out = append(out, u)
	}
	for u := range t.services {
		if _, bad := t.bad[u]; !bad {
			out = append(out, u)
		}
	}
	sort.Strings(out)
	return out
}

// Reasons says why each unhealthy GPU is unhealthy (services included).
func (t *Tracker) Reasons() map[string][]string {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := map[string][]string{}
	for u, s := range t.bad {
		out[u] = append(out[u], s.Reason)
	}
	for u := range t.services {
		out[u] = append(out[u], t.serviceReasonsLocked(u)...)
	}
	return out
}

// States returns a copy of the unhealthy GPUs' kept states (Xids and
// probes; services are not kept).
func (t *Tracker) States() map[string]Unhealthy {
	t.mu.Lock()
	defer t.mu.Unlock()
	return maps.Clone(t.bad)
}

// Counts returns a copy of the counters.
func (t *Tracker) Counts() Counts {
	t.mu.Lock()
	defer t.mu.Unlock()
	c := Counts{EventWaitErrors: t.counts.EventWaitErrors, ProbeFailures: make(map[string]uint64, len(t.counts.ProbeFailures))}
	for u, n := range t.counts.ProbeFailures {
		c.ProbeFailures[u] = n
	}
	return c
}
