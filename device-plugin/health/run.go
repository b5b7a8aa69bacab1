package health

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/gpu"
)

// The tracker's loops, by the name liveness reports.
const (
	LoopEvents = "NVML event loop"
	LoopProbes = "GPU probe loop"
)

// ErrStalled is wrapped by Alive when a loop has not run for too long.
var ErrStalled = errors.New("health loop stalled")

// ErrNVMLSilent is wrapped by NVMLAnswered when no NVML call answered lately.
var ErrNVMLSilent = errors.New("NVML has not answered")

// RunOptions configure Run.
type RunOptions struct {
	Clock clock.WithTicker
	// ProbeInterval: how often every GPU is probed (required).
	ProbeInterval time.Duration
	// WaitMs bounds one NVML event wait; 0 means 1000.
	WaitMs uint32
	// MaxBackoff caps the pause before the event set is re-created after a
	// failure (the pause starts at 1s and doubles); 0 means 1 minute.
	MaxBackoff time.Duration
	// Save persists the unhealthy GPUs after every change (nil: nothing kept).
	Save func(map[string]Unhealthy) error
	// OnChange runs after every health change, once Save returned.
	OnChange func()
}

// Run watches devs until ctx ends: NVML events in one loop (a failing event
// set is logged, counted and re-created with backoff; the probes watch the
// GPUs meanwhile), probes of every GPU in another. It never gives up.
func (t *Tracker) Run(ctx context.Context, lib gpu.DeviceLib, devs []gpu.Device, o RunOptions) {
	if o.WaitMs == 0 {
		o.WaitMs = 1000
	}
	if o.MaxBackoff <= 0 {
		o.MaxBackoff = time.Minute
	}
	var saveMu sync.Mutex
	changed := func() {
		saveMu.Lock()
		if o.Save != nil {
			if err := o.Save(t.States()); err != nil {
				klog.FromContext(ctx).Error(err, "Keeping GPU health in the state directory failed; a restart would forget it")
			}
		}
		saveMu.Unlock()
		if o.OnChange != nil {
			o.OnChange()
		}
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t.probeLoop(ctx, lib, devs, o, changed)
	}()
	t.eventLoop(ctx, lib, devs, o, changed)
	wg.Wait()
}

func (t *Tracker) eventLoop(ctx context.Context, lib gpu.DeviceLib, devs []gpu.Device, o RunOptions, changed func()) {
	logger := klog.FromContext(ctx)
	backoff := time.Second
	for ctx.Err() == nil {
		t.beat(LoopEvents, o.Clock.Now(), false)
		events, err := lib.Events(devs)
		if err == nil {
			var waited bool
			waited, err = t.drain(ctx, events, o, changed)
			events.Close()
			if err == nil {
				return // ctx ended
			}
			if waited {
				backoff = time.Second
			}
		}
		t.countWaitError()
		logger.Error(err, "GPU health events failed; probing the GPUs until the event set is re-created", "retryIn", backoff)
		select {
		case <-ctx.Done():
			return
		case <-o.Clock.After(backoff):
		}
		backoff = min(2*backoff, o.MaxBackoff)
	}
}

// drain waits for events until ctx ends (nil) or a wait fails. waited
// says whether any wait answered.
func (t *Tracker) drain(ctx context.Context, events gpu.Events, o RunOptions, changed func()) (waited bool, err error) {
	logger := klog.FromContext(ctx)
	for ctx.Err() == nil {
		ev, err := events.Wait(o.WaitMs)
		switch {
		case err == nil:
		case errors.Is(err, gpu.ErrTimeout):
			t.beat(LoopEvents, o.Clock.Now(), true)
			waited = true
			continue
		default:
			return waited, err
		}
		waited = true
		t.beat(LoopEvents, o.Clock.Now(), true)
		if t.Ignored(ev.XID) {
			logger.V(4).Info("Ignoring application Xid", "gpu", ev.UUID, "xid", ev.XID)
			continue
		}
		logger.Info("GPU reported a critical Xid; unhealthy until its probe passes and no critical Xid comes for the quiet period", "gpu", ev.UUID, "xid", ev.XID, "quietPeriod", t.quiet)
		if t.Observe(ev, o.Clock.Now()) {
			changed()
		}
	}
	return waited, nil
}

func (t *Tracker) probeLoop(ctx context.Context, lib gpu.DeviceLib, devs []gpu.Device, o RunOptions, changed func()) {
	tick := o.Clock.NewTicker(o.ProbeInterval)
	defer tick.Stop()
	for {
		t.probeAll(ctx, lib, devs, o.Clock.Now(), changed)
		select {
		case <-ctx.Done():
			return
		case <-tick.C():
		}
	}
}

func (t *Tracker) probeAll(ctx context.Context, lib gpu.DeviceLib, devs []gpu.Device, now time.Time, changed func()) {
	logger := klog.FromContext(ctx)
	t.beat(LoopProbes, now, false)
	any := false
	for _, d := range devs {
		err := lib.Probe(d.UUID)
		if t.Probed(d.UUID, err, now) {
			logger.Error(err, "GPU failed its probe; unhealthy until it answers again", "gpu", d.UUID, "index", d.Index)
			any = true
		} else if err != nil {
			logger.V(6).Info("GPU still fails its probe", "gpu", d.UUID, "err", err)
		}
	}
	for _, u := range t.Tick(now) {
		logger.Info("GPU is healthy again: its probe passed and no critical Xid or failed probe came for the quiet period", "gpu", u, "quietPeriod", t.quiet)
		any = true
	}
	if any {
		changed()
	}
}

func (t *Tracker) beat(loop string, now time.Time, nvmlAnswered bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.beats[loop] = now
	if nvmlAnswered {
		t.lastNVML = now
	}
}

func (t *Tracker) countWaitError() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.counts.EventWaitErrors++
}

// Alive checks that both loops ran within window.
func (t *Tracker) Alive(now time.Time, window time.Duration) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, loop := range []string{LoopEvents, LoopProbes} {
		at, ok := t.beats[loop]
		switch {
		case !ok:
			return fmt.Errorf("%w: the %s has not started", ErrStalled, loop)
		case now.Sub(at) > window:
			return fmt.Errorf("%w: the %s last ran %s ago (more than %s)", ErrStalled, loop, now.Sub(at).Round(time.Second), window)
		}
	}
	return nil
}

// NVMLAnswered checks that an NVML call (an event wait, a probe) answered
// within window.
func (t *Tracker) NVMLAnswered(now time.Time, window time.Duration) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch {
	case t.lastNVML.IsZero():
		return fmt.Errorf("%w yet: no event wait or GPU probe has succeeded since start", ErrNVMLSilent)
	case now.Sub(t.lastNVML) > window:
		return fmt.Errorf("%w for %s (more than %s): check the NVIDIA driver (nvidia-smi)", ErrNVMLSilent, now.Sub(t.lastNVML).Round(time.Second), window)
	}
	return nil
}
