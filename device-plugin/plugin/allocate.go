package plugin

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"k8s.io/klog/v2"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/volcano-vgpu/volcano-vgpu/api"
	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/containerdir"
	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/match"
	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/metrics"
	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/podresources"
)

// ErrUnverified: kubelet's PodResources API did not answer, so the plugin
// cannot tell which pod an Allocate is for. It refuses rather than guess from
// the assignments alone: a wrong guess hands one pod's GPUs to another and
// both are lost when PreStart finds out.
var ErrUnverified = errors.New("cannot verify the pod")

// known asks kubelet which pods it lists.
func (p *Plugin) known(ctx context.Context) (match.Known, podresources.Snapshot, error) {
	if p.opts.PodResources == nil {
		return nil, podresources.Snapshot{}, fmt.Errorf("%w: the kubelet PodResources socket is not configured (kubelet.podResourcesSocket)", ErrUnverified)
	}
	snap, err := p.opts.PodResources.List(ctx)
	if err != nil {
		return nil, podresources.Snapshot{}, fmt.Errorf("%w: kubelet's PodResources API did not answer (%v); check that kubelet serves it "+
			"and that its socket is mounted into the device plugin (kubelet.podResourcesSocket)", ErrUnverified, err)
	}
	return snap.Known, snap, nil
}

// knownBy is known, asked again until deadline while kubelet does not
// answer (it may be restarting).
func (p *Plugin) knownBy(ctx context.Context, deadline time.Time) (match.Known, podresources.Snapshot, error) {
	known, snap, err := p.known(ctx)
	for err != nil && p.opts.PodResources != nil && time.Now().Before(deadline) {
		klog.FromContext(ctx).V(2).Info("Kubelet PodResources unavailable; asking again", "err", err)
		select {
		case <-ctx.Done():
			return nil, podresources.Snapshot{}, fmt.Errorf("%w (gave up: %v)", err, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
		known, snap, err = p.known(ctx)
	}
	return known, snap, err
}

// lagging returns a pod kubelet lists that the plugin's cache does not hold
// (kubelet's watch can be ahead of the plugin's informer), or "". A deleted
// pod that kubelet still lists with devices of ours is only terminating.
func (p *Plugin) lagging(snap podresources.Snapshot) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, key := range snap.Pods() {
		if p.named[key] > 0 {
			continue
		}
		if _, deleted := p.gone[key]; deleted && snap.HasDevices(key) {
			continue
		}
		return key
	}
	return ""
}

// Allocate implements dpserver.Service for one container. When nothing
// matches and the pod may not have reached the plugin's cache yet (kubelet
// lists a pod the cache lacks), it waits up to allocate.assignmentWait for
// the cache and tries again. When kubelet's PodResources API does not answer
// (kubelet restarting) it asks again until the same deadline, then refuses:
// it never matches on assignments alone.
func (p *Plugin) Allocate(ctx context.Context, ids []string) (*pluginapi.ContainerAllocateResponse, error) {
	logger := klog.FromContext(ctx)
	start := time.Now()
	defer func() { p.metrics.AllocateDuration.Observe(time.Since(start).Seconds()) }()
	deadline := time.Now().Add(p.opts.Config.Allocate.AssignmentWait.Duration)
	known, snap, err := p.knownBy(ctx, deadline)
	if err != nil {
		p.metrics.AllocationFailures.WithLabelValues(reason(err)).Inc()
		logger.Error(err, "Allocate refused", "ids", ids)
		return nil, err
	}
	for {
		p.mu.Lock()
		waitOn := p.podChanged
		resp, rec, done, err := p.allocateLocked(ctx, ids, known)
		p.mu.Unlock()
		if err == nil {
			logger.V(4).Info("Allocated", "pod", klog.KRef(rec.Namespace, rec.Name), "container", rec.Container, "ids", ids, "gpus", uuidsOf(rec.Devices), "policy", rec.ComputePolicy)
			if done { // known from the ledger on the node; nothing is written to the API
				logger.V(4).Info("Every GPU container of the pod served", "pod", klog.KRef(rec.Namespace, rec.Name))
			}
			return resp, nil
		}
		lag := p.lagging(snap)
		if !errors.Is(err, match.ErrNoMatch) || lag == "" || !time.Now().Before(deadline) {
			p.metrics.AllocationFailures.WithLabelValues(reason(err)).Inc()
			logger.Error(err, "Allocate refused", "ids", ids)
			return nil, err
		}
		logger.V(4).Info("No match yet; waiting for the pod cache", "ids", ids, "kubeletListsUncachedPod", lag)
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%w (gave up: %v)", err, ctx.Err())
		case <-waitOn:
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// reason is the allocation_failures_total label of a refused Allocate.
func reason(err error) string {
	switch {
	case errors.Is(err, ErrUnverified):
		return metrics.ReasonUnverified
	case errors.Is(err, match.ErrBadRequest):
		return metrics.ReasonBadRequest
	case errors.Is(err, match.ErrAmbiguous):
		return metrics.ReasonAmbiguous
	case errors.Is(err, match.ErrNoMatch):
		return metrics.ReasonNoMatch
	case errors.Is(err, ErrMIGNotServed), errors.Is(err, ErrMIGCreate):
		return metrics.ReasonMIG
	}
	return metrics.ReasonInternal
}

// allocateLocked matches, writes the container's files and records it.
// done reports that every container of the pod is now allocated.
func (p *Plugin) allocateLocked(ctx context.Context, ids []string, known match.Known) (*pluginapi.ContainerAllocateResponse, containerdir.Record, bool, error) {
	req, err := match.ParseRequest(ids, p.matchPods, p.ledger)
	if err != nil {
		return nil, containerdir.Record{}, false, err
	}
	c, err := match.ForAllocate(req, p.matchPods, p.ledger, known)
	if err != nil {
		return nil, containerdir.Record{}, false, err
	}
	e := p.pods[c.Pod.UID]
	ct := c.Container()
	rec := containerdir.Record{
		PodUID: c.Pod.UID, Namespace: c.Pod.Namespace, Name: c.Pod.Name, Container: ct.Name,
		Init: ct.Init, Restartable: ct.Restartable, Index: c.Index, IDs: slices.Sorted(slices.Values(ids)),
		Devices: ct.Devices, ComputePolicy: p.policyFor(e), Time: p.opts.Clock.Now().UTC(),
	}
	paths, err := p.store.Paths(rec.PodUID, rec.Container)
	if err != nil {
		return nil, rec, false, fmt.Errorf("pod %s/%s: %w", rec.Namespace, rec.Name, err)
	}
	var mc migCDI // read before an instance is created for the container
	if p.opts.Config.CDI.On() && anyMIG(rec.Devices) {
		if mc, err = p.readMIGCDI(ctx); err != nil {
			return nil, rec, false, fmt.Errorf("pod %s/%s container %s: %w", rec.Namespace, rec.Name, rec.Container, err)
		}
	}
	if rec.Devices, err = p.serveMIG(ctx, rec); err != nil {
		return nil, rec, false, fmt.Errorf("pod %s/%s: %w", rec.Namespace, rec.Name, err)
	}
	if allMIG(rec.Devices) {
		rec.ComputePolicy = api.ComputeNone // each instance's SMs are its own
	}
	threads, err := p.mpsShare(rec)
	if err != nil {
		return nil, rec, false, fmt.Errorf("pod %s/%s: %w", rec.Namespace, rec.Name, err)
	}
	cfg, err := p.opts.Limiter(LimiterInput{
		PodUID: rec.PodUID, Namespace: rec.Namespace, Name: rec.Name, Container: rec.Container,
		Policy: rec.ComputePolicy, SharedDir: p.opts.Config.Limiter.SharedDir, Devices: migVisible(rec.Devices),
		ContextMiB: p.contextMiB(rec.Devices), MPSThreadPercent: threads,
	})
	if err != nil {
		return nil, rec, false, fmt.Errorf("limiter config for pod %s/%s container %s: %w", rec.Namespace, rec.Name, rec.Container, err)
	}
	if _, err := p.store.Write(rec, cfg); err != nil {
		return nil, rec, false, fmt.Errorf("writing the limiter config of pod %s/%s container %s: %w", rec.Namespace, rec.Name, rec.Container, err)
	}
	if threads > 0 {
		p.holdMPS(rec.Devices[0].UUID, threads)
	}
	resp, err := p.response(rec, paths, threads, mc)
	if err != nil {
		return nil, rec, false, fmt.Errorf("pod %s/%s container %s: %w", rec.Namespace, rec.Name, rec.Container, err)
	}
	p.ledger.Record(c, ids)
	p.records[rec.PodUID] = append(p.records[rec.PodUID], rec)
	done := p.ledger.Next(c.Pod.UID) >= len(c.Pod.Containers)
	return resp, rec, done, nil
}

// contextMiB is limiter.contextMiB for the models of the given GPUs, by
// the UUID the container sees (a MIG device's own).
func (p *Plugin) contextMiB(ds []api.DeviceShare) map[string]uint32 {
	out := map[string]uint32{}
	for _, d := range ds {
		for _, g := range p.devices {
			if g.UUID == d.UUID {
				if v := p.opts.Config.Limiter.ContextMiBFor(g.Model); v > 0 {
					out[visibleUUID(d)] = v
				}
			}
		}
	}
	return out
}

// policyFor: pod annotation, else node annotation, else the configured default.
func (p *Plugin) policyFor(e *podEntry) api.ComputePolicy {
	switch {
	case e != nil && e.policyErr == nil && e.policy != "":
		return e.policy
	case p.nodePolicy != "":
		return p.nodePolicy
	}
	return p.opts.Config.DefaultComputePolicy
}

// visibleUUID is the UUID the container sees of d: its MIG device's, else
// the GPU's.
func visibleUUID(d api.DeviceShare) string {
	if d.MIG != nil && d.MIG.UUID != "" {
		return d.MIG.UUID
	}
	return d.UUID
}

func uuidsOf(devs []api.DeviceShare) []string {
	out := make([]string, len(devs))
	for i, d := range devs {
		out[i] = d.UUID
	}
	return out
}

// Preferred implements dpserver.Service.
func (p *Plugin) Preferred(ctx context.Context, r *pluginapi.ContainerPreferredAllocationRequest) ([]string, error) {
	wait := p.opts.Config.Allocate.AssignmentWait.Duration
	known, snap, err := p.knownBy(ctx, time.Now().Add(wait))
	if err != nil {
		// Only a hint: kubelet chooses, and Allocate refuses what it cannot verify.
		klog.FromContext(ctx).Error(err, "No preferred allocation")
		return r.GetMustIncludeDeviceIDs(), nil
	}
	req := match.PreferredRequest{Available: r.GetAvailableDeviceIDs(), MustInclude: r.GetMustIncludeDeviceIDs(), Size: int(r.GetAllocationSize())}
	deadline := time.After(wait)
	var ids []string
	for {
		p.mu.Lock()
		waitOn := p.podChanged
		ids = match.Preferred(req, p.matchPods, p.ledger, known)
		p.mu.Unlock()
		if ids != nil || p.lagging(snap) == "" {
			break
		}
		select { // the pod kubelet is admitting may not be cached yet
		case <-waitOn:
			continue
		case <-deadline:
		case <-ctx.Done():
		}
		break
	}
	if ids == nil {
		ids = r.GetMustIncludeDeviceIDs()
		klog.FromContext(ctx).V(4).Info("No single pending container fits; leaving the choice to kubelet", "size", r.GetAllocationSize())
	} else {
		klog.FromContext(ctx).V(4).Info("Preferred allocation", "ids", ids)
	}
	return ids, nil
}
