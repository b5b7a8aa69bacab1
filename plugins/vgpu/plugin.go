// Package vgpu is the Volcano session plugin that places fractional GPUs.
//
// It is a thin adapter: it rebuilds, at every session open, each GPU node's
// inventory and usage from the API (the device plugin's inventory annotation
// and the assignment annotations of the node's pods), and hands plain values
// to the pure placement core (plugins/placement) for predicates and scores.
// Allocate/Deallocate events book and release GPUs in memory only, so a gang
// that Volcano discards leaves nothing behind. When the gang commits, the
// booking is recorded across sessions (Inflight) in the session goroutine,
// and the assignment reaches the pod with the Binding itself (one API write
// per pod); if binding fails, PreBindRollBack forgets the booking.
//
// Queue fair share: the device plugin advertises vgpu-memory and vgpu-cores
// as node extended resources (and kubelet vgpu-number), so Volcano's own
// proportion/capacity plugins account them in queues like CPU or memory. The
// admission webhook (package admission) rewrites pod requests to totals over
// each container's GPUs and records the per-GPU asks in an annotation, which
// requestOf reads (package podrequest); without it requests are per GPU.
package vgpu

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/klog/v2"
	schedapi "volcano.sh/volcano/pkg/scheduler/api"
	"volcano.sh/volcano/pkg/scheduler/framework"

	"github.com/volcano-vgpu/volcano-vgpu/plugins/placement"
)

// PluginName is the name to list in the scheduler configuration.
const PluginName = "vgpu"

// Shared is what outlives a session: the in-flight assignments and the
// decode cache. main creates one and passes it to NewBuilder.
type Shared struct {
	Now      func() time.Time
	Inflight *Inflight
	cache    *decodeCache
	metrics  *Metrics // nil: none exported

	mu       sync.Mutex
	lastGood *Args // the arguments of the last session that had valid ones
}

// NewShared returns the cross-session state.
func NewShared(now func() time.Time) *Shared {
	return &Shared{Now: now, Inflight: NewInflight(now, 5*time.Minute), cache: newDecodeCache()}
}

// ExportMetrics registers the plugin's metrics on reg (vc-scheduler: the
// default registerer, where Volcano's own series are). Call it before the
// scheduler starts.
func (s *Shared) ExportMetrics(reg prometheus.Registerer) {
	s.metrics = NewMetrics(reg)
}

// NewBuilder returns Volcano's plugin builder bound to shared.
func NewBuilder(shared *Shared) framework.PluginBuilder {
	return func(args framework.Arguments) framework.Plugin {
		return newPlugin(shared, args)
	}
}

type plugin struct {
	shared *Shared
	log    klog.Logger // the plugin's, with the session's UID while one is open
	args   Args
	ok     bool // arguments valid (else the plugin does nothing this session)

	ssn     *framework.Session
	nodes   map[string]*placement.Node // GPU nodes with their usage
	nodeErr map[string]error           // nodes whose inventory is malformed
	booked  map[schedapi.TaskID]placement.Placement
	evicted map[schedapi.TaskID]placement.Placement // released by an eviction that may be undone

	requests sync.Map // schedapi.TaskID -> requestResult: each task's request, parsed once per session
	fitters  sync.Pool
	fits     map[string]*nodeFits // per GPU node, built at open: the node and Fit answers until its bookings change
	shapeMu  sync.Mutex
	shapes   map[string]shapeNumber // fitShapeKey → its number in fitKey and its memo, this session

	gangMu sync.Mutex
	gangs  map[schedapi.JobID]*jobView // built on first use, then kept by the events

	textMu sync.RWMutex
	texts  map[placement.Reason]string // reasonText's memo

	closest sync.Map // schedapi.TaskID -> *closestOf: the refusal nearest to fitting
}

type requestResult struct {
	req        *placement.Request
	nodePolicy placement.Policy // the pod's annotation, else the argument
	shape      string           // shapeKey(req), for the gang view
	fitShape   int32            // fitShapeKey(req) numbered by shapeID, for the Fit memo
	memo       *shapeMemo       // the Fit memo of fitShape: one slot per GPU node
	err        error
}

func newPlugin(shared *Shared, raw framework.Arguments) *plugin {
	p := &plugin{shared: shared, log: klog.Background().WithName(PluginName)}
	a, err := ParseArgs(raw)
	shared.mu.Lock()
	defer shared.mu.Unlock()
	switch {
	case err == nil:
		p.args, p.ok = a, true
		shared.lastGood = &a
	case shared.lastGood != nil:
		// A bad edit of a running scheduler's configuration: keep placing with
		// the last valid arguments rather than stop scheduling GPUs.
		p.log.Error(err, "Ignoring invalid vgpu arguments; using the last valid ones")
		p.args, p.ok = *shared.lastGood, true
	default:
		p.log.Error(err, "Invalid vgpu arguments: GPU pods will not be scheduled until the configuration is fixed")
	}
	return p
}

func (p *plugin) Name() string { return PluginName }

func (p *plugin) OnSessionOpen(ssn *framework.Session) {
	if !p.ok {
		ssn.AddPredicateFn(p.Name(), func(task *schedapi.TaskInfo, node *schedapi.NodeInfo) error {
			return p.refuseAll(task, node)
		})
		return
	}
	if m := p.shared.metrics; m != nil {
		defer m.observe(hookSessionOpen, time.Now())
	}
	start := p.shared.Now()
	p.log = klog.Background().WithName(PluginName).WithValues("session", ssn.UID)
	p.ssn = ssn
	p.requests.Clear()
	p.shapeMu.Lock()
	p.shapes = nil
	p.shapeMu.Unlock()
	p.fitters.New = func() any { return &placement.Fitter{} }
	p.buildState(ssn.Nodes, start)

	ssn.AddPrePredicateFn(p.Name(), p.prePredicate)
	ssn.AddPredicateFn(p.Name(), p.predicate)
	ssn.AddBatchNodeOrderFn(p.Name(), p.batchNodeOrder)
	ssn.AddEventHandler(&framework.EventHandler{AllocateFunc: p.allocate, DeallocateFunc: p.deallocate})
	p.registerSimulation(ssn)
	ssn.RegisterBinder(p.Name(), p)
	p.log.V(4).Info("vgpu session open", "gpuNodes", len(p.nodes), "booked", len(p.booked),
		"inflight", p.shared.Inflight.Len(), "took", p.shared.Now().Sub(start))
}

func (p *plugin) OnSessionClose(ssn *framework.Session) {
	if m := p.shared.metrics; m != nil {
		defer m.observe(hookSessionClose, time.Now())
	}
	if p.ssn != nil {
		p.explainRefusals(ssn)
		p.shared.metrics.setStranded(p.nodes)
	}
	p.closest.Clear()
	p.shared.cache.sweep()
	p.shared.Inflight.Expire()
	p.requests.Clear()
	p.nodes, p.booked, p.evicted, p.fits, p.gangs, p.texts, p.ssn = nil, nil, nil, nil, nil, nil, nil
	p.shapeMu.Lock()
	p.shapes = nil
	p.shapeMu.Unlock()
}

// request returns the task's GPU ask, parsed once per session.
func (p *plugin) request(task *schedapi.TaskInfo) (*placement.Request, error) {
	r := p.parsed(task)
	return r.req, r.err
}

// parsed is request's result with what the memos key on. Predicates call
// it from several goroutines at once: a parsed task is a lock-free read.
func (p *plugin) parsed(task *schedapi.TaskInfo) requestResult {
	if r, ok := p.requests.Load(task.UID); ok {
		return r.(requestResult)
	}
	req, policy, err := requestOf(task.Pod, &p.args)
	r := requestResult{req: req, nodePolicy: policy, err: err}
	if req != nil {
		r.shape = shapeKey(req)
		r.fitShape, r.memo = p.shapeID(fitShapeKey(req, r.shape))
	}
	actual, _ := p.requests.LoadOrStore(task.UID, r)
	return actual.(requestResult)
}

func (p *plugin) fitter() *placement.Fitter { return p.fitters.Get().(*placement.Fitter) }
