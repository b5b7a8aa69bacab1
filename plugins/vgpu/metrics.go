package vgpu

import (
	"math/rand/v2"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/volcano-vgpu/volcano-vgpu/plugins/placement"
)

// hook names the plugin callbacks the latency histogram's hook label tells
// apart.
type hook uint8

const (
	hookSessionOpen hook = iota
	hookPrePredicate
	hookPredicate
	hookNodeOrder
	hookAllocate
	hookDeallocate
	hookSessionClose
	numHooks
)

var hookNames = [numHooks]string{
	hookSessionOpen:  "session_open",
	hookPrePredicate: "pre_predicate",
	hookPredicate:    "predicate",
	hookNodeOrder:    "node_order",
	hookAllocate:     "allocate",
	hookDeallocate:   "deallocate",
	hookSessionClose: "session_close",
}

// Refusal reasons outside the placement core's codes: the node or the
// request could not be handed to it.
const (
	reasonNoInventory        = "no_inventory"
	reasonMalformedInventory = "malformed_inventory"
	reasonInvalidArguments   = "invalid_arguments"
)

// codeNames are the unschedulable counter's reason values for the placement
// core's codes (every code but CodeOK; TestCodeNames keeps this complete).
var codeNames = map[placement.Code]string{
	placement.CodeInvalidRequest:  "invalid_request",
	placement.CodeStale:           "stale_inventory",
	placement.CodeNoGPUs:          "no_gpus",
	placement.CodeTooManyGPUs:     "too_many_gpus",
	placement.CodeTooFewHealthy:   "too_few_healthy",
	placement.CodeTooFewMatching:  "too_few_matching",
	placement.CodeTooFewFit:       "too_few_fit",
	placement.CodeTopology:        "topology",
	placement.CodeUnhealthy:       "unhealthy",
	placement.CodeTypeFiltered:    "type_filtered",
	placement.CodeUUIDFiltered:    "uuid_filtered",
	placement.CodeExclusiveHeld:   "exclusive_held",
	placement.CodeSharesFull:      "shares_full",
	placement.CodeShared:          "shared",
	placement.CodeMemory:          "memory",
	placement.CodeCores:           "cores",
	placement.CodeModeMismatch:    "mode_mismatch",
	placement.CodeTooFewInMode:    "too_few_in_mode",
	placement.CodeGroupShared:     "group_shared",
	placement.CodeMPSOneGPU:       "mps_one_gpu",
	placement.CodeMIGOnly:         "mig_only",
	placement.CodeMIGProfile:      "mig_profile",
	placement.CodeMIGNoPlacement:  "mig_no_placement",
	placement.CodeMIGNoFit:        "mig_no_fit",
	placement.CodeMIGProfileSmall: "mig_profile_small",
}

// maxCode bounds the codes the counters are indexed by.
const maxCode = 64

// Metrics are the plugin's series, registered on the scheduler's registry
// (Volcano's own series are on Prometheus's default registerer, which
// vc-scheduler serves at /metrics). A nil *Metrics records nothing.
type Metrics struct {
	hooks         *prometheus.HistogramVec
	unschedulable *prometheus.CounterVec
	stranded      *prometheus.GaugeVec
	multiGPU      *prometheus.CounterVec

	// Resolved children: the predicate path only does atomic adds.
	hookObs     [numHooks]prometheus.Observer
	byCode      [maxCode]prometheus.Counter
	byName      map[string]prometheus.Counter
	bestLinked  [2]prometheus.Counter // [0] not, [1] best-linked
	strandedMu  sync.Mutex
	strandNodes map[string]bool // nodes with a stranded series

	// sampleMask: a predicate call is timed when a random number & mask is 0
	// (1 in mask+1 calls). Two clock reads cost about 90 ns on a VM's
	// kvm-clock, a quarter of a memoised predicate; a sample keeps the
	// histogram's shape at a sixteenth of that.
	sampleMask uint32
}

// predicateSample is how many predicate calls one timed call stands for.
const predicateSample = 16

// NewMetrics registers the plugin's metrics on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		hooks: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "volcano_vgpu", Subsystem: "scheduler", Name: "hook_duration_seconds",
			Help: "Time the vgpu plugin spent in one call of a scheduler hook, by hook (predicate, node_order, allocate, …); predicate calls are sampled, 1 in 16 at random.",
			// A predicate takes about a microsecond; a session open over thousands of nodes tens of milliseconds.
			Buckets: []float64{1e-6, 2.5e-6, 5e-6, 1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 1e-3, 5e-3, 0.025, 0.1, 0.5, 2},
		}, []string{"hook"}),
		unschedulable: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "volcano_vgpu", Subsystem: "scheduler", Name: "unschedulable_total",
			Help: "Nodes the vgpu predicate refused a task, by reason (the placement core's code; each node-level reason of one refusal once).",
		}, []string{"reason"}),
		stranded: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "volcano_vgpu", Subsystem: "scheduler", Name: "node_memory_stranded_bytes",
			Help: "Free GPU memory of a node no later tenant could use (cores or tenant slots run out first), as booked at the last session's close.",
		}, []string{"node"}),
		multiGPU: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "volcano_vgpu", Subsystem: "scheduler", Name: "multi_gpu_placements_total",
			Help: "Containers of two or more GPUs the vgpu plugin booked, by whether they got their node's best-linked GPU set (best_linked=true|false).",
		}, []string{"best_linked"}),
		byName:      map[string]prometheus.Counter{},
		strandNodes: map[string]bool{},
		sampleMask:  predicateSample - 1,
	}
	for h, name := range hookNames {
		m.hookObs[h] = m.hooks.WithLabelValues(name)
	}
	for c, name := range codeNames {
		m.byCode[c] = m.unschedulable.WithLabelValues(name)
	}
	for _, name := range []string{reasonNoInventory, reasonMalformedInventory, reasonInvalidArguments} {
		m.byName[name] = m.unschedulable.WithLabelValues(name)
	}
	m.bestLinked[0] = m.multiGPU.WithLabelValues("false")
	m.bestLinked[1] = m.multiGPU.WithLabelValues("true")
	reg.MustRegister(m.hooks, m.unschedulable, m.stranded, m.multiGPU)
	return m
}

// observe records one call of h that began at start.
func (m *Metrics) observe(h hook, start time.Time) {
	m.hookObs[h].Observe(time.Since(start).Seconds())
}

// samplePredicate says whether to time this predicate call (m is not nil).
// math/rand/v2's generator is per thread: no lock, no shared cache line.
func (m *Metrics) samplePredicate() bool {
	return rand.Uint32()&m.sampleMask == 0
}

// refused counts one refusal for each distinct node-level code of reasons
// (the first reason's code when none is node-level). It does not allocate.
func (m *Metrics) refused(reasons []placement.Reason) {
	if m == nil || len(reasons) == 0 {
		return
	}
	var seen uint64
	for _, r := range reasons {
		if r.NodeLevel() && seen&(1<<r.Code) == 0 {
			seen |= 1 << r.Code
			m.code(r.Code)
		}
	}
	if seen == 0 {
		m.code(reasons[0].Code)
	}
}

func (m *Metrics) code(c placement.Code) {
	if m != nil && c < maxCode && m.byCode[c] != nil {
		m.byCode[c].Inc()
	}
}

// refusedFor counts a refusal outside the placement core's codes.
func (m *Metrics) refusedFor(reason string) {
	if m != nil {
		m.byName[reason].Inc()
	}
}

// placedMultiGPU counts a container of two or more GPUs.
func (m *Metrics) placedMultiGPU(best bool) {
	if m == nil {
		return
	}
	if best {
		m.bestLinked[1].Inc()
	} else {
		m.bestLinked[0].Inc()
	}
}

// setStranded publishes each GPU node's stranded memory and drops the series
// of nodes no longer in nodes.
func (m *Metrics) setStranded(nodes map[string]*placement.Node) {
	if m == nil {
		return
	}
	m.strandedMu.Lock()
	defer m.strandedMu.Unlock()
	for name := range m.strandNodes {
		if _, ok := nodes[name]; !ok {
			m.stranded.DeleteLabelValues(name)
			delete(m.strandNodes, name)
		}
	}
	for name, n := range nodes {
		var mib int64
		for i := range n.GPUs {
			mib += n.GPUs[i].StrandedMiB()
		}
		m.stranded.WithLabelValues(name).Set(float64(mib) * (1 << 20))
		m.strandNodes[name] = true
	}
}
