// Package metrics exposes the device plugin's Prometheus metrics. Per-GPU
// and per-container gauges are computed from a snapshot at scrape time, so
// deleted pods never leave stale series behind. Names follow Prometheus
// conventions: base units (bytes, ratios), _total for counters.
package metrics

import (
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/volcano-vgpu/volcano-vgpu/api"
	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/usage"
)

// GPU is one GPU at scrape time.
type GPU struct {
	UUID, Model                   string
	Index                         int
	Healthy                       bool
	MemoryMiB, AllocatedMemoryMiB int64
	AllocatedCores                int // percent of one GPU, summed over containers
	Shares, MaxShares             int
	// Use: the memory the containers report booked (their regions, each
	// clamped to its GPU), the memory stranded by the bookings (free, but
	// the cores or tenant slots are gone) and what the compute controller
	// measured (nil: nothing yet).
	UsedMemoryBytes uint64
	StrandedMiB     int64
	Compute         *usage.GPU
	// Mode is how the GPU is shared ("" is time-sliced, as in the inventory).
	Mode api.GPUMode
	// MPS is the state of the GPU's MPS control daemon (nil: not an MPS GPU).
	MPS *MPSDaemon
}

// MPSDaemon is the state of an MPS GPU's control daemon and server.
type MPSDaemon struct {
	// Up: the daemon answered and its server was ACTIVE at the last check.
	Up bool
	// Reason labels why it is not up (package mps's Reason values, or
	// ReasonUnchecked before the first check); "" when up.
	Reason string
	// Failures counts the checks that found it failing after it was up or
	// failing for another reason, by reason.
	Failures map[string]uint64
	// Threads is the active-thread percentage its server is held to (0:
	// none set yet).
	Threads uint32
}

// ReasonUnchecked: the MPS GPU's daemon has not been checked yet.
const ReasonUnchecked = "unchecked"

// Container is one allocated container's limit and use of one GPU.
type Container struct {
	Namespace, Pod, Container, UUID string
	Index                           int // the GPU's NVML index
	Model                           string
	MemoryMiB                       int64
	Cores                           int
	Policy                          api.ComputePolicy // as the limiter config has it
	// MemoryUsed is what libvcuda booked in the container's region
	// (untrusted: clamped to the GPU's memory); nil when unreadable.
	MemoryUsed *uint64
	// Report is the container's usage report (untrusted); nil when unreadable.
	Report *api.UsageDevice
	// Compute is what the node's controller measured; nil before its first period.
	Compute *usage.Tenant
	// MPSThreads is the container's MPS active-thread percentage on an MPS
	// GPU (0: the GPU is not in MPS mode); MPSPinnedMiB its pinned device
	// memory limit there.
	MPSThreads   uint32
	MPSPinnedMiB int64
}

// Health is the health tracker's counters.
type Health struct {
	EventWaitErrors uint64            // NVML event set failures (each retried)
	ProbeFailures   map[string]uint64 // failed GPU probes by UUID
	UnnamedGPUs     int               // GPUs NVML cannot name, left out of the inventory
}

// Unlimited is an allocated container libvcuda.so cannot load into.
type Unlimited struct {
	Namespace, Pod, Container string
	Reason                    string // musl, static
}

// Snapshot is everything the gauges show.
type Snapshot struct {
	GPUs       []GPU
	Containers []Container
	Health     Health
	Unlimited  []Unlimited
	// InventoryPublished is when the node's inventory was last published
	// (zero: not yet, or no publisher runs).
	InventoryPublished time.Time
}

// Allocation failure reasons (label values of allocation_failures_total).
const (
	ReasonBadRequest = "bad_request"
	ReasonNoMatch    = "no_match"
	ReasonAmbiguous  = "ambiguous"
	ReasonInternal   = "internal"
	ReasonUnverified = "unverified" // kubelet's PodResources did not answer
	// ReasonMIG: the container's MIG instance could not be handed out (no
	// instance, the create failed, its placement is taken).
	ReasonMIG = "mig"
)

// AllocationReasons is the fixed set of allocation_failures_total's reason
// label values, in the order its help text lists them.
func AllocationReasons() []string {
	return []string{ReasonBadRequest, ReasonNoMatch, ReasonAmbiguous, ReasonUnverified, ReasonMIG, ReasonInternal}
}

// Metrics holds the counters the plugin updates.
type Metrics struct {
	AllocationFailures *prometheus.CounterVec
	PreStartFailures   prometheus.Counter
	AllocateDuration   prometheus.Histogram
}

const ns = "volcano_vgpu"

var (
	gpuLabels       = []string{"gpu_uuid", "gpu_index", "model"}
	containerLabels = []string{"namespace", "pod", "container", "gpu_uuid", "gpu_index", "model"}

	descMemCap   = prometheus.NewDesc(ns+"_gpu_memory_capacity_bytes", "GPU memory on offer for sharing.", gpuLabels, nil)
	descMemAlloc = prometheus.NewDesc(ns+"_gpu_memory_allocated_bytes", "GPU memory limits of the containers allocated on the GPU.", gpuLabels, nil)
	descCoreCap  = prometheus.NewDesc(ns+"_gpu_cores_capacity_ratio", "Compute capacity of the GPU (1 = the whole GPU).", gpuLabels, nil)
	descCoreAllo = prometheus.NewDesc(ns+"_gpu_cores_allocated_ratio", "Compute shares of the containers allocated on the GPU (1 = the whole GPU).", gpuLabels, nil)
	descShares   = prometheus.NewDesc(ns+"_gpu_shares", "Containers allocated on the GPU.", gpuLabels, nil)
	descSharesMx = prometheus.NewDesc(ns+"_gpu_shares_max", "Containers the GPU may serve (vgpu-number replicas).", gpuLabels, nil)
	descHealthy  = prometheus.NewDesc(ns+"_gpu_healthy", "1 if the GPU is healthy, 0 after a critical Xid or a failed probe until a probe passes after the quiet period.", gpuLabels, nil)
	descCMem     = prometheus.NewDesc(ns+"_container_memory_limit_bytes", "GPU memory limit of a container on one GPU.", containerLabels, nil)
	descCCores   = prometheus.NewDesc(ns+"_container_cores_limit_ratio", "Compute share of a container on one GPU (1 = the whole GPU).", containerLabels, nil)
	descWaitErr  = prometheus.NewDesc(ns+"_nvml_event_wait_errors_total", "NVML event set failures; each is retried with backoff while the probes watch the GPUs.", nil, nil)
	descProbeErr = prometheus.NewDesc(ns+"_gpu_probe_failures_total", "Failed NVML probes of a GPU (lost, or a reset pending).", []string{"gpu_uuid"}, nil)
	descUnnamed  = prometheus.NewDesc(ns+"_gpus_unnamed", "GPUs NVML counts but cannot name; they are missing from the inventory until a restart.", nil, nil)
	descMemUsed  = prometheus.NewDesc(ns+"_gpu_memory_used_bytes", "GPU memory the containers allocated on the GPU have booked through libvcuda (their own reports, each clamped to the GPU's memory).", gpuLabels, nil)
	descStranded = prometheus.NewDesc(ns+"_gpu_memory_stranded_bytes", "Free GPU memory no later tenant could use: the cores or tenant slots run out first at the present tenants' proportions.", gpuLabels, nil)
	descBusy     = prometheus.NewDesc(ns+"_gpu_busy_ratio", "Busy fraction of the GPU measured by the node's compute controller (NVML), averaged over about 2 s.", gpuLabels, nil)
	descBusySec  = prometheus.NewDesc(ns+"_gpu_busy_seconds_total", "Busy time of the GPU measured by the node's compute controller while it had tenants.", gpuLabels, nil)
	descCUsed    = prometheus.NewDesc(ns+"_container_memory_used_bytes", "GPU memory a container's processes have booked through libvcuda on one GPU (the container's own report, clamped to the GPU's memory; container_memory_held_bytes is NVML's view).", containerLabels, nil)
	descCTarget  = prometheus.NewDesc(ns+"_container_compute_share_target_ratio", "The compute controller's target share for a container this period (1 = the whole GPU; balance: with capacity lent by idle tenants).", containerLabels, nil)
	descCAchieve = prometheus.NewDesc(ns+"_container_compute_share_achieved_ratio", "Busy fraction of the GPU the compute controller attributes to a container, averaged over about 2 s.", containerLabels, nil)
	descCBusySec = prometheus.NewDesc(ns+"_container_gpu_busy_seconds_total", "GPU busy time the compute controller attributes to a container.", containerLabels, nil)
	descCLimited = prometheus.NewDesc(ns+"_container_compute_throttled", "1 while the compute controller admits a container's launches only within an allowance, 0 while it lets them run freely.", containerLabels, nil)
	descCWaits   = prometheus.NewDesc(ns+"_container_launch_waits_total", "Kernel launches of a container that waited for allowance (the container's own report).", containerLabels, nil)
	descCPolicy  = prometheus.NewDesc(ns+"_container_compute_policy", "1 for the compute policy (fixed, balance, none) of a container on one GPU.", append(containerLabels[:len(containerLabels):len(containerLabels)], "policy"), nil)
	descPublish  = prometheus.NewDesc(ns+"_inventory_published_timestamp_seconds", "When the device plugin last published the node's inventory (its heartbeat); the scheduler places nothing on a node whose heartbeat is older than its vgpu.staleAfter.", nil, nil)
	descMode     = prometheus.NewDesc(ns+"_gpu_sharing_mode", "1 for the sharing mode of the GPU (mode: time-sliced, mps), as the node's inventory publishes it.", append(gpuLabels[:len(gpuLabels):len(gpuLabels)], "mode"), nil)
	descMPSUp    = prometheus.NewDesc(ns+"_gpu_mps_daemon_up", "1 while the MPS GPU's control daemon answers and its server is ACTIVE with no fatal fault, 0 otherwise (the GPU is then unhealthy).", gpuLabels, nil)
	descMPSDown  = prometheus.NewDesc(ns+"_gpu_mps_daemon_failure", "1 for why the MPS GPU's daemon is not up (reason: server_fault, no_answer, daemon_start, server_start, compute_mode, unchecked, other).", append(gpuLabels[:len(gpuLabels):len(gpuLabels)], "reason"), nil)
	descMPSFails = prometheus.NewDesc(ns+"_gpu_mps_daemon_failures_total", "Checks of the MPS GPU's daemon that found a new failure (after it was up, or failing for another reason), by reason.", append(gpuLabels[:len(gpuLabels):len(gpuLabels)], "reason"), nil)
	descMPSCeil  = prometheus.NewDesc(ns+"_gpu_mps_server_active_thread_ratio", "Active-thread fraction the MPS GPU's server is held to: the largest share booked on the GPU (what a client that raises its own percentage can reach).", gpuLabels, nil)
	descCThreads = prometheus.NewDesc(ns+"_container_mps_active_thread_ratio", "MPS active-thread fraction of a container on an MPS GPU (CUDA_MPS_ACTIVE_THREAD_PERCENTAGE / 100), for each of its processes.", containerLabels, nil)
	descCPinned  = prometheus.NewDesc(ns+"_container_mps_pinned_memory_limit_bytes", "MPS pinned device memory limit of a container on an MPS GPU (CUDA_MPS_PINNED_DEVICE_MEM_LIMIT), per process; libvcuda caps the container as a whole.", containerLabels, nil)
	descUnlim    = prometheus.NewDesc(ns+"_container_unlimited", "1 for an allocated container whose image or entrypoint libvcuda.so cannot load into (reason: musl, static): its GPU use is not limited.",
		[]string{"namespace", "pod", "container", "reason"}, nil)
)

type collector struct{ snapshot func() Snapshot }

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descMemCap, descMemAlloc, descCoreCap, descCoreAllo, descShares, descSharesMx, descHealthy, descCMem, descCCores, descWaitErr, descProbeErr, descUnnamed, descUnlim,
		descMemUsed, descStranded, descBusy, descBusySec, descCUsed, descCTarget, descCAchieve, descCBusySec, descCLimited, descCWaits, descCPolicy, descPublish,
		descMode, descMPSUp, descMPSDown, descMPSFails, descMPSCeil, descCThreads, descCPinned} {
		ch <- d
	}
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	s := c.snapshot()
	for _, g := range s.GPUs {
		l := []string{g.UUID, strconv.Itoa(g.Index), g.Model}
		healthy := 0.0
		if g.Healthy {
			healthy = 1
		}
		for _, m := range []struct {
			d *prometheus.Desc
			v float64
		}{
			{descMemCap, float64(g.MemoryMiB) * mib}, {descMemAlloc, float64(g.AllocatedMemoryMiB) * mib},
			{descCoreCap, 1}, {descCoreAllo, float64(g.AllocatedCores) / 100},
			{descShares, float64(g.Shares)}, {descSharesMx, float64(g.MaxShares)}, {descHealthy, healthy},
			{descMemUsed, float64(g.UsedMemoryBytes)}, {descStranded, float64(g.StrandedMiB) * mib},
		} {
			ch <- prometheus.MustNewConstMetric(m.d, prometheus.GaugeValue, m.v, l...)
		}
		if u := g.Compute; u != nil {
			ch <- prometheus.MustNewConstMetric(descBusy, prometheus.GaugeValue, u.Busy, l...)
			ch <- prometheus.MustNewConstMetric(descBusySec, prometheus.CounterValue, u.BusySeconds, l...)
		}
		mode := g.Mode
		if mode == "" {
			mode = api.ModeTimeSliced
		}
		ch <- prometheus.MustNewConstMetric(descMode, prometheus.GaugeValue, 1, append(l, string(mode))...)
		if m := g.MPS; m != nil {
			collectMPS(ch, l, m)
		}
	}
	ch <- prometheus.MustNewConstMetric(descWaitErr, prometheus.CounterValue, float64(s.Health.EventWaitErrors))
	for u, n := range s.Health.ProbeFailures {
		ch <- prometheus.MustNewConstMetric(descProbeErr, prometheus.CounterValue, float64(n), u)
	}
	if !s.InventoryPublished.IsZero() {
		ch <- prometheus.MustNewConstMetric(descPublish, prometheus.GaugeValue, float64(s.InventoryPublished.UnixNano())/1e9)
	}
	ch <- prometheus.MustNewConstMetric(descUnnamed, prometheus.GaugeValue, float64(s.Health.UnnamedGPUs))
	for _, c := range s.Containers {
		l := []string{c.Namespace, c.Pod, c.Container, c.UUID, strconv.Itoa(c.Index), c.Model}
		ch <- prometheus.MustNewConstMetric(descCMem, prometheus.GaugeValue, float64(c.MemoryMiB)*mib, l...)
		ch <- prometheus.MustNewConstMetric(descCCores, prometheus.GaugeValue, float64(c.Cores)/100, l...)
		if c.Policy != "" {
			ch <- prometheus.MustNewConstMetric(descCPolicy, prometheus.GaugeValue, 1, append(l, string(c.Policy))...)
		}
		if c.MemoryUsed != nil {
			ch <- prometheus.MustNewConstMetric(descCUsed, prometheus.GaugeValue, float64(*c.MemoryUsed), l...)
		}
		if c.Report != nil {
			ch <- prometheus.MustNewConstMetric(descCWaits, prometheus.CounterValue, float64(c.Report.Waits), l...)
		}
		if c.MPSThreads > 0 {
			ch <- prometheus.MustNewConstMetric(descCThreads, prometheus.GaugeValue, float64(c.MPSThreads)/100, l...)
			ch <- prometheus.MustNewConstMetric(descCPinned, prometheus.GaugeValue, float64(c.MPSPinnedMiB)*mib, l...)
		}
		if u := c.Compute; u != nil {
			limited := 0.0
			if u.Limited {
				limited = 1
			}
			ch <- prometheus.MustNewConstMetric(descCTarget, prometheus.GaugeValue, u.Target, l...)
			ch <- prometheus.MustNewConstMetric(descCAchieve, prometheus.GaugeValue, u.Achieved, l...)
			ch <- prometheus.MustNewConstMetric(descCBusySec, prometheus.CounterValue, u.BusySeconds, l...)
			ch <- prometheus.MustNewConstMetric(descCLimited, prometheus.GaugeValue, limited, l...)
		}
	}
	for _, u := range s.Unlimited {
		ch <- prometheus.MustNewConstMetric(descUnlim, prometheus.GaugeValue, 1, u.Namespace, u.Pod, u.Container, u.Reason)
	}
}

// collectMPS sends an MPS GPU's daemon series; l are the GPU's labels.
func collectMPS(ch chan<- prometheus.Metric, l []string, m *MPSDaemon) {
	up := 0.0
	if m.Up {
		up = 1
	}
	ch <- prometheus.MustNewConstMetric(descMPSUp, prometheus.GaugeValue, up, l...)
	if !m.Up {
		reason := m.Reason
		if reason == "" {
			reason = ReasonUnchecked
		}
		ch <- prometheus.MustNewConstMetric(descMPSDown, prometheus.GaugeValue, 1, append(l, reason)...)
	}
	for r, n := range m.Failures {
		ch <- prometheus.MustNewConstMetric(descMPSFails, prometheus.CounterValue, float64(n), append(l, r)...)
	}
	if m.Threads > 0 {
		ch <- prometheus.MustNewConstMetric(descMPSCeil, prometheus.GaugeValue, float64(m.Threads)/100, l...)
	}
}

const mib = 1 << 20

// New registers the metrics with reg (nil: a private registry nobody
// scrapes, so tests can run in parallel).
func New(reg prometheus.Registerer, snapshot func() Snapshot) *Metrics {
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	m := &Metrics{
		AllocationFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Name: "allocation_failures_total",
			Help: "Allocate calls refused, by reason (" + strings.Join(AllocationReasons(), ", ") + ").",
		}, []string{"reason"}),
		PreStartFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: ns, Name: "prestart_failures_total",
			Help: "PreStartContainer calls refused because kubelet's devices differ from what Allocate served.",
		}),
		AllocateDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: ns, Name: "allocate_duration_seconds",
			Help:    "Time to answer one container's Allocate.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 4, 8),
		}),
	}
	reg.MustRegister(collector{snapshot: snapshot}, m.AllocationFailures, m.PreStartFailures, m.AllocateDuration)
	return m
}
