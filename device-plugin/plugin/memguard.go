package plugin

import (
	"context"

	corev1 "k8s.io/api/core/v1"

	"github.com/volcano-vgpu/volcano-vgpu/api"
	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/config"
	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/memguard"
	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/procmap"
	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/reschedule"
)

// memorySource is a device library that can list each GPU's processes.
type memorySource interface{ MemorySource() memguard.Source }

// memoryGuard builds the node's memory guard, or nil when it is off or the
// library cannot list processes (a simulated node without the fake NVML).
func (p *Plugin) memoryGuard(ctx context.Context) (r *memguard.Runner, stop func()) {
	src, ok := p.opts.Lib.(memorySource)
	if p.opts.Config.MemoryGuard.Disabled || !ok {
		return nil, func() {}
	}
	rec, stop := reschedule.Recorder(ctx, p.opts.Client, p.opts.Node)
	g := p.opts.Config.MemoryGuard
	r = &memguard.Runner{
		Source: src.MemorySource(), List: p.memTenants, Owners: p.owners,
		Policy: memguard.Policy{ToleranceMiB: g.ToleranceMiB, UncountedContextMiB: g.UncountedContextMiB},
		Period: g.Period.Duration, Clock: p.opts.Clock, Recorder: rec, Metrics: p.guardMetrics,
		KillUnlimited: g.UnlimitedProcesses == config.UnlimitedKill,
	}
	if g.UnlimitedProcesses != config.UnlimitedIgnore {
		l := p.opts.Config.Limiter
		lib := procmap.StatLibrary(l.HostLibrary, l.ContainerLibrary)
		m := procmap.Mapper{ProcRoot: p.procRoot()}
		r.Limited = func(pid uint32) (bool, error) { return m.Maps(pid, lib) }
	}
	return r, stop
}

// owners maps a host pid to "podUID/container" (compute.Tenant.Key) of the
// vGPU container it runs in, through its cgroup and the pods bound here;
// ok is false for any other process. The memory guard uses it; it has the
// shape the compute controller's per-process attribution takes.
func (p *Plugin) owners(hostPID uint32) (key string, ok bool) {
	return procmap.Mapper{ProcRoot: p.procRoot(), Names: p.containerName}.Owners(hostPID)
}

// procRoot is where the host's processes are read: Options.ProcRoot, else
// the device library's own view of the node's processes where it has one
// (a simulated node's: its emulated containers' cgroups), else /proc.
func (p *Plugin) procRoot() string {
	if p.opts.ProcRoot != "" {
		return p.opts.ProcRoot
	}
	if l, ok := p.opts.Lib.(interface{ ProcRoot() string }); ok {
		return l.ProcRoot()
	}
	return ""
}

// containerName is procmap.Names over the pods bound here.
func (p *Plugin) containerName(podUID, containerID string) (string, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	n, ok := p.containerIDs[podUID][containerID]
	return n, ok
}

// noteContainerIDs keeps the runtime IDs of a vGPU pod's containers (p.mu held).
func (p *Plugin) noteContainerIDs(pod *corev1.Pod) {
	p.containerIDs[string(pod.UID)] = procmap.ContainerIDs(pod)
}

// memTenants lists every container allocated here on every GPU with its cap.
func (p *Plugin) memTenants() []memguard.Tenant {
	byUUID := map[string]int{}
	models := map[string]string{}
	for _, d := range p.devices {
		byUUID[d.UUID], models[d.UUID] = d.Index, d.Model
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []memguard.Tenant
	for _, recs := range p.records {
		for _, rec := range recs {
			for _, d := range rec.Devices {
				if d.MIG != nil {
					continue // the instance's memory is its own: nobody else's process runs on it
				}
				// libvcuda holds the container to its share here; MPS's SM
				// partition and full GPUs need no throttle
				compute := d.Cores < 100 && rec.ComputePolicy != api.ComputeNone && !p.isMPS(d.UUID)
				out = append(out, memguard.Tenant{
					Key: rec.PodUID + "/" + rec.Container, PodUID: rec.PodUID,
					Namespace: rec.Namespace, Pod: rec.Name, Container: rec.Container,
					UUID: d.UUID, Index: byUUID[d.UUID], Model: models[d.UUID], CapMiB: d.MemoryMiB,
					ContextMiB: p.opts.Config.Limiter.ContextMiBFor(models[d.UUID]),
					Compute:    compute, Cores: d.Cores,
				})
			}
		}
	}
	return out
}
