package plugin

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"path/filepath"

	"k8s.io/klog/v2"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/volcano-vgpu/volcano-vgpu/api"
	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/containerdir"
	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/metrics"
	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/mps"
)

// ErrMPS is wrapped when Allocate refuses a container on an MPS GPU.
var ErrMPS = errors.New("cannot serve the container in MPS mode")

// mpsService names MPS in a GPU's health reasons.
const mpsService = "mps"

// mpsShmDir is the host directory MPS clients and servers share as /dev/shm.
func (p *Plugin) mpsShmDir() string { return filepath.Join(mps.Root(p.opts.Config.StateDir), "shm") }

// isMPS reports whether the GPU uuid is in MPS mode.
func (p *Plugin) isMPS(uuid string) bool {
	for _, d := range p.devices {
		if d.UUID == uuid {
			return p.mode(d) == api.ModeMPS
		}
	}
	return false
}

// daemon is the MPS control daemon of GPU uuid.
func (p *Plugin) daemon(uuid string) *mps.Daemon {
	m := p.opts.Config.MPS
	return mps.New(mps.Root(p.opts.Config.StateDir), uuid, m.ControlCommand, m.ProbeTimeout.Duration)
}

// mpsDaemons are the daemons of the node's MPS GPUs (described ones only).
func (p *Plugin) mpsDaemons() []*mps.Daemon {
	var out []*mps.Daemon
	for _, d := range p.devices {
		if d.Failure == "" && p.mode(d) == api.ModeMPS {
			out = append(out, p.daemon(d.UUID))
		}
	}
	return out
}

// mpsShare is the MPS active-thread percentage of a container (0: its GPUs
// are time-sliced). A container on an MPS GPU has exactly that one GPU (the
// scheduler places no multi-GPU container on MPS GPUs) and runs as
// mps.clientUID where its pod says whom it runs as.
func (p *Plugin) mpsShare(rec containerdir.Record) (uint32, error) {
	var onMPS []string
	for _, d := range rec.Devices {
		if p.isMPS(d.UUID) {
			onMPS = append(onMPS, d.UUID)
		}
	}
	if len(onMPS) == 0 {
		return 0, nil
	}
	if len(rec.Devices) > 1 {
		return 0, fmt.Errorf("%w: container %q is assigned %d GPUs, %v in MPS mode; an MPS GPU serves one GPU per container (reschedule the pod; a scheduler without MPS support placed it)", ErrMPS, rec.Container, len(rec.Devices), onMPS)
	}
	want := p.opts.Config.MPS.UID()
	if e := p.pods[rec.PodUID]; e != nil {
		if uid, ok := e.users[rec.Container]; ok && uid != want {
			return 0, fmt.Errorf("%w: container %q runs as user %d, and the MPS server of GPU %s serves user %d (mps.clientUID): a client of another user would wait until every client of that user exits; set runAsUser: %d, or use a time-sliced GPU (%s: hami-core)", ErrMPS, rec.Container, uid, onMPS[0], want, want, api.VolcanoModeKey)
		}
	}
	return mpsThreads(rec.Devices[0].Cores), nil
}

// mpsThreads is the active-thread percentage of a share of cores on an MPS
// GPU: the cores, 100 when it asked none (or the whole GPU).
func mpsThreads(cores int) uint32 {
	if cores <= 0 || cores > 100 {
		return 100
	}
	return uint32(cores)
}

// addMPS gives a container on an MPS GPU its pipe directory (read-only),
// the shared memory MPS uses, and the MPS variables (libvcuda sets them
// again from the read-only config, so a process cannot raise them).
func (p *Plugin) addMPS(r *pluginapi.ContainerAllocateResponse, rec containerdir.Record, threads uint32) {
	d := rec.Devices[0]
	r.Envs[api.EnvMPSPipeDir] = api.MPSPipeDir
	r.Envs[api.EnvMPSThreads] = fmt.Sprint(threads)
	r.Envs[api.EnvMPSPinnedMem] = fmt.Sprintf("0=%dM", d.MemoryMiB)
	r.Mounts = append(r.Mounts,
		&pluginapi.Mount{ContainerPath: api.MPSPipeDir, HostPath: p.daemon(d.UUID).PipeDir(), ReadOnly: true},
		&pluginapi.Mount{ContainerPath: api.MPSShmPath, HostPath: p.mpsShmDir(), ReadOnly: false},
	)
}

// computeModes sets compute modes through NVML where configured and the
// library can (nil: left alone).
func (p *Plugin) computeModes() mps.ComputeModes {
	if !p.opts.Config.MPS.ComputeModeEnabled() {
		return nil
	}
	m, _ := p.opts.Lib.(mps.ComputeModes)
	return m
}

// runMPS stops the daemons of GPUs that left MPS mode, then supervises those
// of the MPS GPUs until ctx ends. Their health joins the GPUs' health.
func (p *Plugin) runMPS(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	keep := map[string]bool{"shm": true}
	daemons := p.mpsDaemons()
	for _, d := range daemons {
		keep[d.UUID] = true
	}
	m := p.opts.Config.MPS
	if err := mps.Retire(ctx, mps.Root(p.opts.Config.StateDir), keep, m.ControlCommand, m.ProbeTimeout.Duration, p.computeModes()); err != nil {
		logger.Error(err, "Stopping the MPS daemons of GPUs that left MPS mode")
	}
	if len(daemons) == 0 {
		return nil
	}
	s := &mps.Supervisor{
		Daemons: daemons, UID: m.UID(), Interval: m.ProbeInterval.Duration, Clock: p.opts.Clock, Modes: p.computeModes(),
		Report: p.reportMPS, Ceiling: p.mpsCeiling,
	}
	p.mu.Lock()
	p.mpsSup = s
	p.mu.Unlock()
	return s.Run(ctx)
}

// mpsCeiling is the largest share served on GPU uuid: its MPS server is held
// to it, so a process that bypasses libvcuda and raises its own percentage
// gets no more than the largest share on its GPU (its own share where it is
// the largest or all shares are equal).
func (p *Plugin) mpsCeiling(uuid string) uint32 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.mpsCeilingLocked(uuid)
}

func (p *Plugin) mpsCeilingLocked(uuid string) uint32 {
	var top uint32
	for _, recs := range p.records {
		for _, r := range recs {
			for _, d := range r.Devices {
				if c := mpsThreads(d.Cores); d.UUID == uuid && c > top {
					top = c
				}
			}
		}
	}
	return top
}

// holdMPS sets GPU uuid's server ceiling before a container with share
// threads starts (its clients take the ceiling when they connect): the
// largest share on the GPU, this one included. Called with p.mu held.
func (p *Plugin) holdMPS(uuid string, threads uint32) {
	if p.mpsSup == nil {
		return
	}
	if err := p.mpsSup.Hold(context.Background(), uuid, max(threads, p.mpsCeilingLocked(uuid))); err != nil {
		klog.Background().Error(err, "Raising the MPS server's active-thread percentage; the container's clients may get less than their share until the next check", "gpu", uuid, "percent", threads)
	}
}

// mpsCheck is what the metrics show of an MPS GPU's daemon: its last
// check's reason label ("" up) and the failures counted by reason.
type mpsCheck struct {
	reason   string
	failures map[string]uint64
}

// reportMPS records an MPS check of one GPU in its health and metrics.
func (p *Plugin) reportMPS(uuid string, err error) {
	reason := mps.Reason(err)
	p.mu.Lock()
	if p.mpsChecks == nil {
		p.mpsChecks = map[string]*mpsCheck{}
	}
	c := p.mpsChecks[uuid]
	if c == nil {
		c = &mpsCheck{failures: map[string]uint64{}}
		p.mpsChecks[uuid] = c
	}
	if reason != "" && reason != c.reason {
		c.failures[reason]++
	}
	c.reason = reason
	p.mu.Unlock()
	if p.health.Service(uuid, mpsService, err, p.opts.Clock.Now()) {
		klog.Background().Info("MPS health of a GPU changed", "gpu", uuid, "healthy", err == nil, "reason", errString(err))
		p.healthChanged()
	}
}

// mpsMetricsLocked is the MPS daemon of GPU uuid as the metrics show it.
// Called with p.mu held.
func (p *Plugin) mpsMetricsLocked(uuid string) *metrics.MPSDaemon {
	m := &metrics.MPSDaemon{Reason: metrics.ReasonUnchecked}
	if c := p.mpsChecks[uuid]; c != nil {
		m.Up, m.Reason, m.Failures = c.reason == "", c.reason, maps.Clone(c.failures)
	}
	if p.mpsSup != nil {
		m.Threads = p.mpsSup.Held(uuid)
	}
	return m
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
