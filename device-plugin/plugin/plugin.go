// Package plugin is the vGPU device plugin of one node: it discovers the
// GPUs, keeps their health, publishes the node report, serves kubelet
// (through package dpserver) and answers Allocate by matching kubelet's
// device IDs to the scheduler's assignment of exactly one pending container
// (package match), writing that container's limiter config.
package plugin

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	"k8s.io/utils/clock"

	"github.com/volcano-vgpu/volcano-vgpu/api"
	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/cdi"
	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/config"
	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/containerdir"
	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/dpserver"
	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/gpu"
	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/health"
	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/match"
	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/memguard"
	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/metrics"
	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/migledger"
	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/mps"
	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/podresources"
	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/preloadhook"
	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/replica"
	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/reschedule"
	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/usage"
)

// Options are the plugin's dependencies.
type Options struct {
	Node   string
	Client kubernetes.Interface
	Lib    gpu.DeviceLib
	Config config.Config
	// MaxShares overrides Config.MaxShares (simulated nodes carry their own).
	MaxShares int
	// PodResources is kubelet's PodResources API. Allocate and PreStart
	// refuse what it cannot confirm (nil: every Allocate and PreStart).
	PodResources podresources.Lister
	Limiter      LimiterEncoder
	Clock        clock.WithTicker
	// Registry receives the plugin's metrics; nil registers nothing.
	Registry prometheus.Registerer
	// ProcRoot is the host's /proc, where the memory guard reads a GPU
	// process's cgroup ("" = /proc: the plugin runs with hostPID).
	ProcRoot string
}

// Plugin is one node's device plugin.
type Plugin struct {
	opts     Options
	resource corev1.ResourceName
	store    containerdir.Store
	specs    cdi.Specs    // the plugin's own CDI specs (CDI mode)
	devices  []gpu.Device // with those NVML could not describe now (Failure)
	// described is the last full description of every GPU, kept in the
	// health state; unnamed counts GPUs NVML could not even name.
	described []gpu.Device
	unnamed   int
	topo      gpu.Topology
	// mig: the MIG state each GPU in mode mig publishes (read at start,
	// again after every change); migMu guards the map and its values
	// (taken after mu where both are).
	migMu sync.RWMutex
	mig   map[string]*api.MIG
	// migIDs: each MIG GPU's device minor and its MIG devices' instance
	// IDs, from the same reads (under migMu): the device nodes of the
	// plugin's CDI specs of MIG devices.
	migIDs map[string]migIDs
	// noToolkitSpecLogged: the missing toolkit spec was logged (once, until
	// one is found again).
	noToolkitSpecLogged atomic.Bool
	// migs: the MIG instances handed to pods (under mu).
	migs      *migledger.Ledger
	health    *health.Tracker
	metrics   *metrics.Metrics
	usage     *usage.Tracker   // what the compute controller measured, for the metrics
	published func() time.Time // when the node report last published the inventory (set by Run)
	// guardMetrics are the memory guard's series (registered even when it is off).
	guardMetrics *memguard.Metrics
	resched      *reschedule.Rescheduler // nil unless allocate.reschedule

	mu           sync.Mutex
	pods         map[string]*podEntry             // UID → entry, pods bound here that request vgpu-number
	matchPods    map[string]*match.Pod            // UID → entry.match, the view package match takes
	ledger       *match.Ledger                    // what Allocate served
	records      map[string][]containerdir.Record // UID → served containers, for metrics
	reports      map[string]preloadhook.Report    // UID/container → the preload hook's image report
	names        map[string]string                // UID → namespace/name of every pod bound here
	containerIDs map[string]map[string]string     // UID → runtime container ID → name, vGPU pods (memory guard)
	named        map[string]int                   // namespace/name → how many UIDs carry it
	gone         map[string]time.Time             // namespace/name → when its last pod was deleted
	nodePolicy   api.ComputePolicy
	synced       bool          // informers synced: GC may trust the pod cache
	hamiPending  bool          // deviceshare's handshake awaits an answer
	devChanged   chan struct{} // closed when device health changes
	server       *dpserver.Server
	podChanged   chan struct{}        // closed when the pod cache changes
	mpsSup       *mps.Supervisor      // the MPS GPUs' daemons (nil: none, or not started yet)
	mpsChecks    map[string]*mpsCheck // GPU → its MPS daemon's last check, for the metrics
}

var _ dpserver.Service = (*Plugin)(nil)

// New discovers the GPUs and restores what earlier runs allocated.
func New(ctx context.Context, o Options) (*Plugin, error) {
	logger := klog.FromContext(ctx)
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	if o.MaxShares == 0 {
		o.MaxShares = o.Config.MaxShares
	}
	if o.Limiter == nil {
		return nil, fmt.Errorf("plugin: no limiter config encoder")
	}
	p := &Plugin{
		opts: o, resource: corev1.ResourceName(o.Config.ResourceNames.Number),
		store: containerdir.Store{Root: o.Config.StateDir}, specs: cdi.Specs{Dir: o.Config.CDI.SpecDir},
		pods: map[string]*podEntry{}, matchPods: map[string]*match.Pod{}, ledger: match.NewLedger(),
		records: map[string][]containerdir.Record{}, reports: map[string]preloadhook.Report{}, names: map[string]string{}, containerIDs: map[string]map[string]string{}, named: map[string]int{}, gone: map[string]time.Time{}, devChanged: make(chan struct{}), podChanged: make(chan struct{}),
	}
	var err error
	if err := os.MkdirAll(o.Config.StateDir, 0o755); err != nil {
		return nil, fmt.Errorf("stateDir %s: %w", o.Config.StateDir, err)
	}
	if err := p.discover(ctx); err != nil {
		return nil, err
	}
	if err := p.discoverMIG(ctx); err != nil {
		return nil, err
	}
	if p.migs, err = migledger.Load(filepath.Join(o.Config.StateDir, migledger.File)); err != nil {
		return nil, err
	}
	if p.topo, err = o.Lib.Topology(p.devices); err != nil {
		return nil, fmt.Errorf("measuring GPU topology: %w", err)
	}
	if o.Config.PreloadEnabled() {
		// Each container has its own preload file now; the shared one stays for
		// containers allocated by earlier versions (kubelet re-uses their mounts).
		if _, err = p.store.WritePreload(o.Config.Limiter.ContainerLibrary); err != nil {
			return nil, fmt.Errorf("writing %s under stateDir %s: %w", containerdir.PreloadFile, o.Config.StateDir, err)
		}
	}
	recs, err := p.store.Records()
	if err != nil {
		logger.Error(err, "Some allocation records could not be read back; their containers' PreStart checks will fail")
	}
	for _, r := range recs {
		p.restore(r)
	}
	p.usage = usage.NewTracker(o.Clock.Now)
	p.metrics = metrics.New(o.Registry, p.snapshot)
	p.guardMetrics = memguard.NewMetrics(o.Registry)
	logger.V(2).Info("Discovered GPUs", "node", o.Node, "gpus", len(p.devices), "maxShares", o.MaxShares, "restoredContainers", len(recs))
	for _, d := range p.devices {
		if d.ReservedMiB > 0 {
			logger.V(2).Info("Not offering the memory the driver reserves", "gpu", d.UUID, "model", d.Model, "offeredMiB", d.MemoryMiB, "reservedMiB", d.ReservedMiB)
		}
	}
	return p, nil
}

func (p *Plugin) restore(r containerdir.Record) {
	p.ledger.Restore(match.Served{PodUID: r.PodUID, Namespace: r.Namespace, Name: r.Name, Container: r.Container,
		Init: r.Init, Restartable: r.Restartable, Index: r.Index, IDs: r.IDs})
	p.records[r.PodUID] = append(p.records[r.PodUID], r)
}

// Inventory is the node report: GPUs with health, links.
func (p *Plugin) Inventory() api.Inventory {
	inv := api.Inventory{NVLinks: p.topo.NVLinks, PCIe: p.topo.PCIe}
	for _, d := range p.devices {
		g := api.GPU{
			Index: d.Index, UUID: d.UUID, Model: d.Model, MemoryMiB: d.MemoryMiB,
			Healthy: p.health.Healthy(d.UUID), NUMA: d.NUMA, MaxShares: p.opts.MaxShares,
			Mode: p.mode(d), MIG: p.migOf(d.UUID),
		}
		if g.Mode == api.ModeMIG && g.MIG == nil {
			g.Healthy = false // NVML could not describe it at start: no MIG state to offer
		}
		inv.GPUs = append(inv.GPUs, g)
	}
	return inv
}

// mode is how d is shared (the config's sharing rules for this node).
func (p *Plugin) mode(d gpu.Device) api.GPUMode {
	return p.opts.Config.Sharing.ModeFor(p.opts.Node, d.Model, d.UUID)
}

// Devices implements dpserver.Service.
func (p *Plugin) Devices() ([]*pluginapi.Device, <-chan struct{}) {
	p.mu.Lock()
	ch := p.devChanged
	p.mu.Unlock()
	return replica.Devices(p.Inventory().GPUs), ch
}

// healthChanged wakes ListAndWatch streams and the reporter.
func (p *Plugin) healthChanged() {
	p.mu.Lock()
	close(p.devChanged)
	p.devChanged = make(chan struct{})
	p.mu.Unlock()
}

// DevicesChanged returns a channel closed at the next health change.
func (p *Plugin) DevicesChanged() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.devChanged
}

// Health exposes the tracker (tests inject events through the simulator).
func (p *Plugin) Health() *health.Tracker { return p.health }

// upsertPod updates the cache from an informer event.
func (p *Plugin) upsertPod(pod *corev1.Pod) {
	if pod.Spec.NodeName != p.opts.Node || terminal(pod) {
		p.deletePod(string(pod.UID))
		return
	}
	e, ok := toEntry(pod, p.resource, p.opts.Node)
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, seen := p.names[string(pod.UID)]; !seen {
		key := pod.Namespace + "/" + pod.Name
		p.names[string(pod.UID)] = key
		p.named[key]++
		p.notePodChange()
	}
	if !ok {
		return
	}
	p.pods[string(pod.UID)] = e
	p.matchPods[string(pod.UID)] = e.match
	p.noteContainerIDs(pod)
	p.notePodChange()
}

func (p *Plugin) deletePod(uid string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if key, ok := p.names[uid]; ok {
		delete(p.names, uid)
		if p.named[key]--; p.named[key] <= 0 {
			delete(p.named, key)
			p.gone[key] = p.opts.Clock.Now()
		}
	}
	delete(p.containerIDs, uid)
	if _, ok := p.pods[uid]; !ok && len(p.records[uid]) == 0 {
		return
	}
	delete(p.pods, uid)
	delete(p.matchPods, uid)
	p.ledger.Forget(uid)
	for _, r := range p.records[uid] {
		delete(p.reports, reportKey(r))
	}
	delete(p.records, uid)
	p.notePodChange()
}

func (p *Plugin) notePodChange() {
	close(p.podChanged)
	p.podChanged = make(chan struct{})
}

func (p *Plugin) setNodePolicy(node *corev1.Node) {
	pol := api.ComputePolicy("")
	if v, ok := node.Annotations[api.ComputePolicyNodeKey]; ok {
		parsed, err := api.ParseComputePolicy(api.ComputePolicyNodeKey, v)
		if err != nil {
			klog.Background().Error(err, "Ignoring the node's compute policy", "node", node.Name)
		}
		pol = parsed
	}
	p.mu.Lock()
	p.nodePolicy = pol
	p.mu.Unlock()
}
