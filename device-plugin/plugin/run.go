package plugin

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/volcano-vgpu/volcano-vgpu/api"
	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/compute"
	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/dpserver"
	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/nodereport"
	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/reschedule"
)

// Run starts everything and blocks until ctx ends. A value on restart
// (SIGHUP) re-creates the kubelet socket and registers again.
func (p *Plugin) Run(ctx context.Context, restart <-chan struct{}) error {
	logger := klog.FromContext(ctx).WithValues("node", p.opts.Node)
	ctx = klog.NewContext(ctx, logger)
	var wg sync.WaitGroup
	defer wg.Wait()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if p.opts.Config.Allocate.Reschedule {
		rec, stop := reschedule.Recorder(ctx, p.opts.Client, p.opts.Node)
		defer stop()
		p.resched = reschedule.New(p.opts.Client, rec, p.opts.Node, p.resource, p.opts.Clock)
		wg.Add(1)
		go func() { defer wg.Done(); p.resched.Run(ctx) }()
	}
	if err := p.startInformers(ctx); err != nil {
		return err
	}
	errs := make(chan error, 8)
	goRun := func(name string, fn func() error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := fn(); err != nil {
				errs <- fmt.Errorf("%s: %w", name, err)
			}
		}()
	}
	if !p.opts.Config.Health.Disabled {
		goRun("health", func() error { p.runHealth(ctx); return nil })
	}
	rep := p.reporter()
	p.mu.Lock()
	p.published = rep.LastPublished
	p.mu.Unlock()
	goRun("node report", func() error { rep.Run(ctx, p.Inventory, p.signal(ctx), 0); return nil })
	goRun("gc", func() error { p.gcLoop(ctx); return nil })
	goRun("mig", func() error { p.migLoop(ctx, p.opts.Config.Allocate.GCPeriod.Duration); return nil })
	if p.opts.Config.CDI.KeepsPreload() {
		goRun("image reports", func() error { p.imageReportLoop(ctx); return nil })
	}
	if src, ok := p.opts.Lib.(interface{ ComputeSource() compute.Source }); ok {
		r := &compute.Runner{Source: src.ComputeSource(), List: p.tenancies, Clock: compute.Monotonic, Observe: p.observe,
			Unconfined: !p.opts.Config.SlotsConfine()}
		if !p.opts.Config.MemoryGuard.Disabled {
			// Owners: each tenant's GPU time is calibrated from NVML's
			// per-process samples, mapped host pid -> cgroup -> container
			// (docs/limiter.md). It needs the host's pids, which the chart
			// grants with the memory guard; without them costs come from the
			// device-wide busy time alone.
			r.Owners = p.owners
		}
		goRun("compute controller", func() error { return r.Run(ctx) })
	}
	goRun("mps", func() error { return p.runMPS(ctx) })
	if guard, stop := p.memoryGuard(ctx); guard != nil {
		defer stop()
		goRun("memory guard", func() error { return guard.Run(ctx) })
	}
	if p.opts.Config.Report.HAMi {
		goRun("deviceshare handshake", func() error { p.hamiLoop(ctx); return nil })
	}
	srv := &dpserver.Server{
		Service: p, ResourceName: string(p.resource), PluginsDir: p.opts.Config.Kubelet.DevicePluginsDir,
		SocketName: p.opts.Config.Kubelet.SocketName, KubeletSocket: p.opts.Config.Kubelet.KubeletSocket,
	}
	p.mu.Lock()
	p.server = srv
	p.mu.Unlock()
	goRun("kubelet server", func() error { return srv.Run(ctx, restart) })
	select {
	case <-ctx.Done():
		return nil
	case err := <-errs:
		return err
	}
}

// tenancies lists every container allocated here on every GPU, for the
// compute controller.
func (p *Plugin) tenancies() ([]compute.Tenancy, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []compute.Tenancy
	for _, recs := range p.records {
		for _, rec := range recs {
			paths, err := p.store.Paths(rec.PodUID, rec.Container)
			if err != nil {
				continue
			}
			for i, d := range rec.Devices {
				if p.isMPS(d.UUID) || d.MIG != nil {
					continue // the SM partition (MPS) or the instance's own SMs (MIG) bound it, not the controller
				}
				share := float64(d.Cores) / 100
				if d.Cores == 0 {
					share = 1 // no share asked: best effort
				}
				out = append(out, compute.Tenancy{
					Tenant: compute.Tenant{Key: rec.PodUID + "/" + rec.Container, Share: share, Policy: rec.ComputePolicy},
					UUID:   d.UUID, Index: i, Devices: len(rec.Devices), ControlPath: paths.Control,
					UsagePath: filepath.Join(paths.Shared, api.UsageFile),
				})
			}
		}
	}
	return out, nil
}

func (p *Plugin) reporter() *nodereport.Reporter {
	r := &nodereport.Reporter{
		Client: p.opts.Client, Node: p.opts.Node, Names: p.opts.Config.ResourceNames,
		Clock: p.opts.Clock, HeartbeatPeriod: p.opts.Config.Report.HeartbeatPeriod.Duration,
	}
	if p.opts.Config.Report.HAMi {
		r.Extra = p.hamiAnnotations
	}
	return r
}

// signal turns device changes into a channel of notifications.
func (p *Plugin) signal(ctx context.Context) <-chan struct{} {
	out := make(chan struct{}, 1)
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-p.DevicesChanged():
			}
			select {
			case out <- struct{}{}:
			default:
			}
		}
	}()
	return out
}

func (p *Plugin) startInformers(ctx context.Context) error {
	c := p.opts.Client
	podFactory := informers.NewSharedInformerFactoryWithOptions(c, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", p.opts.Node).String()
	}))
	pods := podFactory.Core().V1().Pods().Informer()
	if _, err := pods.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { p.onPod(obj) },
		UpdateFunc: func(_, obj any) { p.onPod(obj) },
		DeleteFunc: func(obj any) {
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			if pod, ok := obj.(*corev1.Pod); ok {
				p.deletePod(string(pod.UID))
			}
		},
	}); err != nil {
		return err
	}
	nodeFactory := informers.NewSharedInformerFactoryWithOptions(c, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("metadata.name", p.opts.Node).String()
	}))
	nodes := nodeFactory.Core().V1().Nodes().Informer()
	if _, err := nodes.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { p.onNode(ctx, obj) },
		UpdateFunc: func(_, obj any) { p.onNode(ctx, obj) },
	}); err != nil {
		return err
	}
	podFactory.Start(ctx.Done())
	nodeFactory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), pods.HasSynced, nodes.HasSynced) {
		return fmt.Errorf("pod and node caches of node %s did not sync: %w (can the plugin's ServiceAccount list pods and get its node?)", p.opts.Node, context.Cause(ctx))
	}
	p.mu.Lock()
	p.synced = true
	p.mu.Unlock()
	p.reconcileRestored(ctx)
	p.reconcileMIG(ctx)
	return nil
}

// reconcileRestored squares what New restored from the state directory with
// the synced pod cache, at once rather than a GC period later: pods deleted
// (or finished) while the plugin was down are forgotten. What was served
// comes from the plugin's own records on the node, never from the pod: the
// plugin writes nothing on pods.
func (p *Plugin) reconcileRestored(ctx context.Context) {
	var stale []string
	p.mu.Lock()
	for uid := range p.records {
		if _, bound := p.names[uid]; !bound {
			stale = append(stale, uid)
		}
	}
	p.mu.Unlock()
	for _, uid := range stale {
		p.deletePod(uid)
	}
	if len(stale) > 0 {
		klog.FromContext(ctx).V(2).Info("Reconciled restored allocations with the API", "forgotten", len(stale))
	}
}

func (p *Plugin) onPod(obj any) {
	if pod, ok := obj.(*corev1.Pod); ok {
		p.upsertPod(pod)
		if p.resched != nil {
			p.resched.Observe(pod)
		}
	}
}

func (p *Plugin) onNode(ctx context.Context, obj any) {
	node, ok := obj.(*corev1.Node)
	if !ok || node.Name != p.opts.Node {
		return
	}
	p.setNodePolicy(node)
	if p.opts.Config.Report.HAMi {
		p.answerHandshake(ctx, node)
	}
}

// gcLoop removes the state of pods that are gone.
func (p *Plugin) gcLoop(ctx context.Context) {
	p.every(ctx, p.opts.Config.Allocate.GCPeriod.Duration, func() { p.GC(ctx, time.Minute) })
}

// every calls fn each period on the plugin's clock until ctx ends.
func (p *Plugin) every(ctx context.Context, period time.Duration, fn func()) {
	t := p.opts.Clock.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
			fn()
		}
	}
}

// GC removes the directories of pods that no longer exist (or are
// terminal) and are older than minAge.
func (p *Plugin) GC(ctx context.Context, minAge time.Duration) {
	p.mu.Lock()
	synced := p.synced
	live := make(map[string]bool, len(p.pods))
	for uid := range p.pods {
		live[uid] = true
	}
	p.mu.Unlock()
	if !synced {
		return
	}
	p.mu.Lock()
	for key, at := range p.gone {
		if p.opts.Clock.Since(at) > 10*time.Minute {
			delete(p.gone, key)
		}
	}
	p.mu.Unlock()
	removed, err := p.store.GC(func(uid string) bool { return live[uid] }, minAge, p.opts.Clock.Now())
	if err != nil {
		klog.FromContext(ctx).Error(err, "Removing the state of deleted pods")
	}
	for _, uid := range removed {
		p.deletePod(uid)
	}
	p.gcSpecs(ctx)
	if len(removed) > 0 {
		klog.FromContext(ctx).V(2).Info("Removed the limiter files of deleted pods", "podUIDs", removed)
	}
}

// gcSpecs removes the plugin's CDI specs (limiter and MIG devices) of pods
// whose state is gone (the runtime only reads them while creating a
// container).
func (p *Plugin) gcSpecs(ctx context.Context) {
	if !p.opts.Config.CDI.On() {
		return
	}
	uids, err := p.specs.Pods()
	if err != nil {
		klog.FromContext(ctx).Error(err, "Listing the plugin's CDI specs", "cdi.specDir", p.specs.Dir)
		return
	}
	for _, uid := range uids {
		if p.store.HasPod(uid) {
			continue
		}
		if err := p.specs.Remove(uid); err != nil {
			klog.FromContext(ctx).Error(err, "Removing the CDI specs of a deleted pod", "podUID", uid)
			continue
		}
		klog.FromContext(ctx).V(4).Info("Removed the CDI specs of a deleted pod", "podUID", uid)
	}
}
