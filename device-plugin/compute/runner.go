package compute

import (
	"context"
	"errors"
	"io/fs"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"

	"github.com/volcano-vgpu/volcano-vgpu/api"
)

// Window is a GPU's measured busy time over [StartNs, EndNs] of CLOCK_MONOTONIC.
type Window struct {
	StartNs, EndNs uint64
	BusyNs         float64
}

// Source gives a GPU's busy time since the previous call (NVML device
// utilization samples). ok is false while there is nothing new. mono and
// wall are the two clocks read at the same moment.
type Source interface {
	Busy(uuid string, mono uint64, wall time.Time) (w Window, ok bool, err error)
}

// ClockSource is a Source that also reads a GPU's SM clock now (MHz; ok is
// false where the driver does not say). A power-capped card clocks lower
// under full load (an H200: 1473 MHz solo at full load, 1980 MHz with one
// tenant at 10-50%), and a kernel's GPU time moves with it: the fit of
// different programs' costs takes each window's busy time at the clock of
// its windows' mean (regress).
type ClockSource interface {
	ClockMHz(uuid string) (float64, bool)
}

// history is one container's launched counter over the last seconds, read at
// every poll, so that the work of a sample window is read at its edges.
type history struct {
	uuid    string   // the GPU
	t       []uint64 // ns, increasing
	v       []uint64
	waits   uint64
	seen    bool
	rewound uint64 // when the counter last went backwards (ns; 0: never)
	// what the controller was last given and when: an interpolation at a
	// later window edge never gives it less unless the counter went back
	passed, passedAt uint64
}

// latest is the newest reading of the counter (0 before any).
func (h *history) latest() uint64 {
	if n := len(h.v); n > 0 {
		return h.v[n-1]
	}
	return 0
}

// report is the counter at a window's edge x for the controller: never less
// than what it was last given, unless the counter itself went backwards
// since (then the step back is the controller's to see and charge).
func (h *history) report(x, now uint64) uint64 {
	v := h.at(x)
	if h.rewound <= h.passedAt {
		v = max(v, h.passed)
	}
	h.passed, h.passedAt = v, now
	return v
}

const historyNs = 6e9

// add records a reading. A counter that went backwards (a tenant rewinding
// its report, or a report file created anew) starts the history again from
// it: the controller sees the step back and charges it, and no window across
// it calibrates the tenant's cost.
func (h *history) add(now, launched, waits uint64) {
	if n := len(h.v); n > 0 && launched < h.v[n-1] {
		h.t, h.v = h.t[:0], h.v[:0]
		h.rewound = now
	}
	h.t, h.v, h.waits, h.seen = append(h.t, now), append(h.v, launched), waits, true
	i := 0
	for i < len(h.t)-2 && h.t[i] < now-historyNs {
		i++
	}
	h.t, h.v = h.t[i:], h.v[i:]
}

// at interpolates the counter at time x.
func (h *history) at(x uint64) uint64 {
	n := len(h.t)
	switch {
	case n == 0:
		return 0
	case x <= h.t[0]:
		return h.v[0]
	case x >= h.t[n-1]:
		return h.v[n-1]
	}
	i := 1
	for h.t[i] < x {
		i++
	}
	f := float64(x-h.t[i-1]) / float64(h.t[i]-h.t[i-1])
	return h.v[i-1] + uint64(f*float64(h.v[i]-h.v[i-1]))
}

// Tenancy is one container on one GPU, as the device plugin allocated it.
type Tenancy struct {
	Tenant
	UUID        string // the GPU
	Index       int    // the GPU's position in the container's limiter config
	Devices     int    // devices in that config
	ControlPath string // host path of the container's vcuda.control
	UsagePath   string // host path of its vcuda.usage (in the container's shared dir)
}

// Clock is CLOCK_MONOTONIC in ns (the clock libvcuda reads).
type Clock func() uint64

// Monotonic reads CLOCK_MONOTONIC.
func Monotonic() uint64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return uint64(ts.Sec)*1e9 + uint64(ts.Nsec)
}

// Runner runs one GPU controller per GPU with tenants.
type Runner struct {
	Source Source
	List   func() ([]Tenancy, error) // the containers allocated on this node
	Poll   time.Duration             // how often to look for new samples (default 20ms)
	Clock  Clock
	// Owners maps a host pid that NVML reports on a GPU to the tenant
	// (Tenant.Key) whose container runs it. When set and Source is also a
	// ProcessSource, each tenant's GPU ns per launched unit is calibrated
	// from its processes' measured GPU time, and GPU time of processes no
	// tenant owns is foreign load; nil: costs come from the device-wide busy
	// time alone (solo windows and a pooled cost).
	Owners func(hostPID uint32) (key string, ok bool)
	// Observe, when set, sees every period's decisions (metrics, tests).
	Observe func(Observation)
	// Unconfined: launch slots never confine (limiter.confineSlots: false);
	// they only say when each tenant's credit comes (assignSlots).
	Unconfined bool

	gpus    map[string]*GPU
	files   map[string]*controlMap
	hist    map[string]*history // by usage path
	samples map[string]*gpuSamples
	// changed: per GPU, when its tenants last changed (one's first reading,
	// one gone); a window that started before then may hold work no
	// tenant's counter covers (Input.Partial)
	changed map[string]uint64
}

// Observation is one control period of one GPU.
type Observation struct {
	UUID string
	Busy float64 // the GPU's busy fraction in the period
	// Period: how long the period (its device samples' window) was; its
	// samples set it, not the poll (a sample stamped late makes one short)
	Period  time.Duration
	Foreign float64 // fraction of the GPU taken by work no tenant's samples explain (GPU.Foreign)
	// Lag: how long ago the period ended when its device samples were read
	// (they arrive late; the poll's granularity included)
	Lag       time.Duration
	ClockMHz  float64 // the SM clock's mean over the period (0: not read)
	Decisions []Decision
	// Fitted: the tenants' costs came from the fit over their turns
	// (GPU.Fitted)
	Fitted bool
}

// Run polls until ctx ends.
func (r *Runner) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx).WithName("compute")
	ctx = klog.NewContext(ctx, logger)
	poll := r.Poll
	if poll <= 0 {
		poll = 20 * time.Millisecond
	}
	t := time.NewTicker(poll)
	defer t.Stop()
	defer r.closeAll()
	logger.V(2).Info("Compute controller started", "poll", poll)
	for {
		r.Tick(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Tick runs every GPU whose busy time has new samples.
func (r *Runner) Tick(ctx context.Context) {
	logger := klog.FromContext(ctx)
	if r.gpus == nil {
		r.gpus, r.files, r.hist = map[string]*GPU{}, map[string]*controlMap{}, map[string]*history{}
		r.samples, r.changed = map[string]*gpuSamples{}, map[string]uint64{}
	}
	ts, err := r.List()
	if err != nil {
		logger.Error(err, "Listing containers for the compute controller")
	}
	now, wall := r.Clock(), time.Now()
	seen := map[string]bool{}
	for _, t := range ts {
		key := t.UsagePath + "#" + strconv.Itoa(t.Index)
		seen[key] = true
		h := r.hist[key]
		if h == nil {
			h = &history{uuid: t.UUID}
			r.hist[key] = h
		}
		b, err := readUsage(t.UsagePath, t.Devices)
		switch {
		case err == nil:
			u := api.ReadUsage(b, t.Index)
			if len(h.t) == 0 { // its first reading: what it ran before is in no counter read
				r.changed[t.UUID] = now
			}
			h.add(now, u.Launched, u.Waits)
		case errors.Is(err, fs.ErrNotExist): // no process started yet
		default:
			logger.V(2).Info("Ignoring a container's usage report", "gpu", t.UUID, "container", t.Key, "err", err)
		}
	}
	for key, h := range r.hist {
		if !seen[key] {
			if len(h.t) > 0 { // its last work still shows in windows to come
				r.changed[h.uuid] = now
			}
			delete(r.hist, key)
		}
	}
	byGPU := map[string][]Tenancy{}
	for _, t := range ts {
		byGPU[t.UUID] = append(byGPU[t.UUID], t)
	}
	for uuid := range r.gpus {
		if len(byGPU[uuid]) == 0 {
			delete(r.gpus, uuid)
			delete(r.samples, uuid)
			delete(r.changed, uuid)
		}
	}
	procs, _ := r.Source.(ProcessSource)
	live := map[string]bool{}
	for uuid, list := range byGPU {
		for _, t := range list {
			live[t.ControlPath] = true
		}
		w, ok, err := r.Source.Busy(uuid, now, wall)
		if err != nil {
			logger.V(4).Info("No GPU utilization", "gpu", uuid, "err", err)
			continue
		}
		gs := r.samples[uuid]
		if gs == nil {
			gs = &gpuSamples{}
			r.samples[uuid] = gs
		}
		if cs, ok := r.Source.(ClockSource); ok {
			if mhz, ok := cs.ClockMHz(uuid); ok {
				gs.addClock(now, mhz)
			}
		}
		if r.Owners != nil && procs != nil {
			ps, err := procs.Processes(uuid, now, wall)
			if err != nil {
				logger.V(4).Info("No per-process utilization", "gpu", uuid, "err", err)
			}
			gs.pending = append(gs.pending, ps...)
		}
		if !ok || w.EndNs <= w.StartNs {
			continue
		}
		gs.addWindow(w)
		busy, period := w.BusyNs, float64(w.EndNs-w.StartNs)
		g := r.gpus[uuid]
		if g == nil {
			g = NewGPU()
			g.unconfined = r.Unconfined
			r.gpus[uuid] = g
		}
		in := Input{BusyNs: busy, PeriodNs: period, ClockMHz: gs.clockOver(w.StartNs, w.EndNs), NowNs: now, LagNs: float64(now - min(now, w.EndNs)),
			Partial: w.StartNs < r.changed[uuid], Unshared: r.Owners == nil || procs == nil || gs.unshared()}
		if r.Owners != nil {
			// tenants with a usage report: one that never launched (no
			// report yet) has no sample to wait for
			keys := make([]string, 0, len(list))
			for _, t := range list {
				if h := r.hist[t.UsagePath+"#"+strconv.Itoa(t.Index)]; h != nil && len(h.t) > 0 {
					keys = append(keys, t.Key)
				}
			}
			in.Measurement = gs.measurement(now, r.Owners, r.unitsOf(list), keys)
			if gs.partial >= partialSay && !gs.sharesSeen && !gs.partialSaid {
				logger.Info("Per-process samples on this GPU leave out containers that launched in their round (one process a round, reading the whole device, as an H200 gives them): they calibrate only rounds where one container ran; containers' costs come from the device-wide estimate", "gpu", uuid, "rounds", gs.partial)
				gs.partialSaid = true
			}
			if gs.overReads > 0 && !gs.overReadSaid {
				logger.Info("Per-process samples on this GPU are not shares of it (a round's samples sum above its busy time, as each active process reads about the whole device while contexts time-slice): they calibrate only rounds where one container ran; containers' costs come from the device-wide estimate", "gpu", uuid)
				gs.overReadSaid = true
			}
			if gs.sayUnmapped(in.Measurement) {
				logger.Info("No per-process sample maps to a container on this GPU although its containers launch work: their GPU time is not taken as foreign load; check that the device plugin sees host pids (hostPID) and the cgroup layout", "gpu", uuid, "rounds", gs.unmapped)
			}
		}
		kept := list[:0:0]
		for _, t := range list {
			// the work launched by the end of the window, read at its edge
			h := r.hist[t.UsagePath+"#"+strconv.Itoa(t.Index)]
			rep := Report{Launched: h.report(w.EndNs, now), Waits: h.waits, Latest: h.latest(), Lost: h.rewound > w.EndNs}
			in.Tenants = append(in.Tenants, TenantInput{Tenant: t.Tenant, Report: rep})
			kept = append(kept, t)
		}
		ds := g.Step(in)
		if f := g.Fitted(); f != gs.fittedSaid {
			if f {
				logger.Info("Containers on this GPU run programs whose launches cost differently: their costs come from the device's busy time, fitted while they take turns lending share (each turn lasts seconds)", "gpu", uuid, "perProcessShares", !in.Unshared)
			} else {
				logger.V(2).Info("Containers on this GPU share one cost per launched unit again", "gpu", uuid)
			}
			gs.fittedSaid = f
		}
		for i, d := range ds {
			m, err := r.control(kept[i])
			if err != nil {
				logger.Info("Cannot write a container's allowance", "gpu", uuid, "container", d.Key, "err", err)
				continue
			}
			api.PublishControl(m.b, kept[i].Index, d.Control)
			logger.V(6).Info("Allowance", "gpu", uuid, "container", d.Key, "share", d.Share, "measured", d.Measured, "mode", d.Control.Mode, "rate", d.Control.Rate)
		}
		if m := in.Measurement; m != nil {
			logger.V(5).Info("Per-process samples", "gpu", uuid, "span", m.SpanNs, "tenants", len(m.Tenants), "foreign", g.Foreign())
		}
		if r.Observe != nil {
			r.Observe(Observation{UUID: uuid, Busy: busy / period, Period: time.Duration(period), Foreign: g.Foreign(), Decisions: ds, Lag: time.Duration(in.LagNs), ClockMHz: in.ClockMHz, Fitted: g.Fitted()})
		}
	}
	for p, m := range r.files {
		if !live[p] {
			_ = m.close()
			delete(r.files, p)
		}
	}
}

// unitsOf reads a tenant's launched units over [a, b] from its history; ok
// is false when its counter went backwards since a (or it has none).
func (r *Runner) unitsOf(list []Tenancy) func(key string, a, b uint64) (float64, bool) {
	return func(key string, a, b uint64) (float64, bool) {
		var sum float64
		found := false
		for _, t := range list {
			if t.Key != key {
				continue
			}
			h := r.hist[t.UsagePath+"#"+strconv.Itoa(t.Index)]
			if h == nil || len(h.t) == 0 || h.rewound >= a || h.t[0] > a {
				return 0, false
			}
			sum += float64(h.at(b) - h.at(a))
			found = true
		}
		return sum, found
	}
}

func (r *Runner) control(t Tenancy) (*controlMap, error) {
	if m := r.files[t.ControlPath]; m != nil {
		return m, nil
	}
	m, err := openControl(t.ControlPath, t.Devices)
	if err != nil {
		return nil, err
	}
	r.files[t.ControlPath] = m
	return m, nil
}

func (r *Runner) closeAll() {
	for p, m := range r.files {
		_ = m.close()
		delete(r.files, p)
	}
}
