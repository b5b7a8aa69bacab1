package plugin

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"k8s.io/klog/v2"

	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/health"
	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/metrics"
)

// healthPath is the kept health state.
func (p *Plugin) healthPath() string { return filepath.Join(p.opts.Config.StateDir, health.StateFile) }

// discover lists the GPUs, completes those NVML cannot describe now from the
// kept state, and starts their health from it: a GPU unhealthy before a
// restart stays unhealthy until its probe passes; a kept state this build
// cannot read is moved aside and every GPU waits for its first probe.
func (p *Plugin) discover(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	found, err := p.opts.Lib.Devices()
	if err != nil {
		return fmt.Errorf("discovering GPUs: %w", err)
	}
	now := p.opts.Clock.Now()
	kept, err := health.LoadState(p.healthPath())
	if err != nil {
		aside := p.healthPath() + ".bad"
		logger.Error(err, "Cannot read the kept GPU health; moving it aside and treating every GPU as unhealthy until its first probe passes", "file", p.healthPath(), "movedTo", aside)
		if rerr := os.Rename(p.healthPath(), aside); rerr != nil {
			return fmt.Errorf("moving the unreadable %s aside: %w (remove the file)", p.healthPath(), rerr)
		}
		kept = health.State{Unhealthy: map[string]health.Unhealthy{}}
		for _, d := range found {
			if d.UUID != "" {
				kept.Unhealthy[d.UUID] = health.Unhealthy{Since: now, Reason: "kept health state unreadable: waiting for a probe"}
			}
		}
	}
	var unnamed []int
	p.devices, unnamed = health.Describe(found, kept.GPUs)
	p.unnamed = len(unnamed)
	if len(unnamed) > 0 {
		logger.Error(errors.New("NVML gave no UUID"), "GPUs left out of the inventory: NVML cannot name them and no earlier run described them; restart the plugin once nvidia-smi lists them", "indexes", unnamed)
	}
	for _, d := range p.devices {
		if d.Failure != "" {
			logger.Error(errors.New(d.Failure), "NVML cannot describe a GPU; offering it as unhealthy", "gpu", d.UUID, "index", d.Index)
		}
	}
	p.described = health.Descriptions(p.devices, kept.GPUs)
	p.health = health.NewTracker(p.devices, health.Options{
		IgnoredXIDs: p.opts.Config.Health.IgnoredXIDs, QuietPeriod: p.opts.Config.Health.RecoveryPeriod.Duration,
	}, kept.Unhealthy, now)
	if bad := p.health.Unhealthy(); len(bad) > 0 {
		logger.Info("GPUs start unhealthy until their probe passes", "gpus", bad)
	}
	return p.saveHealth(p.health.States())
}

func (p *Plugin) saveHealth(states map[string]health.Unhealthy) error {
	return health.SaveState(p.healthPath(), health.State{GPUs: p.described, Unhealthy: states})
}

// runHealth watches the GPUs until ctx ends.
func (p *Plugin) runHealth(ctx context.Context) {
	p.health.Run(ctx, p.opts.Lib, p.devices, health.RunOptions{
		Clock: p.opts.Clock, ProbeInterval: p.opts.Config.Health.ProbeInterval.Duration,
		Save: p.saveHealth, OnChange: p.healthChanged,
	})
}

// healthSnapshot feeds the health counters of the metrics.
func (p *Plugin) healthSnapshot() metrics.Health {
	c := p.health.Counts()
	return metrics.Health{EventWaitErrors: c.EventWaitErrors, ProbeFailures: c.ProbeFailures, UnnamedGPUs: p.unnamed}
}

// livenessWindow is how long the health loops may stay silent: the event
// loop answers every second, or backs off for at most a minute.
func (p *Plugin) livenessWindow() time.Duration {
	return max(2*time.Minute, 3*p.opts.Config.Health.ProbeInterval.Duration)
}

// Live checks that the health loops run (for the liveness probe: a kubelet
// restart must not fail it).
func (p *Plugin) Live() error {
	if p.opts.Config.Health.Disabled {
		return nil
	}
	return p.health.Alive(p.opts.Clock.Now(), p.livenessWindow())
}

// NVMLReady checks that NVML answered lately.
func (p *Plugin) NVMLReady() error {
	if p.opts.Config.Health.Disabled {
		return nil
	}
	return p.health.NVMLAnswered(p.opts.Clock.Now(), p.livenessWindow())
}

// Registered checks that kubelet knows the plugin.
func (p *Plugin) Registered() error {
	p.mu.Lock()
	srv := p.server
	p.mu.Unlock()
	if srv == nil {
		return errors.New("the kubelet server has not started")
	}
	return srv.Registered()
}
