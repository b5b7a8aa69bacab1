package memguard

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the guard's series. Label names follow package metrics
// (gpu_uuid, gpu_index, model, namespace, pod, container).
type Metrics struct {
	Kills   *prometheus.CounterVec // volcano_vgpu_memory_guard_kills_total
	Held    *prometheus.GaugeVec   // volcano_vgpu_container_memory_held_bytes
	Unowned *prometheus.GaugeVec   // volcano_vgpu_gpu_memory_unowned_bytes
	Errors  *prometheus.CounterVec // volcano_vgpu_memory_guard_errors_total
	// Unlimited: volcano_vgpu_container_unlimited_processes;
	// UnlimitedKills: volcano_vgpu_unlimited_process_kills_total.
	Unlimited      *prometheus.GaugeVec
	UnlimitedKills *prometheus.CounterVec
}

var tenantLabels = []string{"namespace", "pod", "container", "gpu_uuid", "gpu_index", "model"}

// NewMetrics registers the guard's metrics with reg (nil: a private
// registry nobody scrapes).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	m := &Metrics{
		Kills: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "volcano_vgpu", Name: "memory_guard_kills_total",
			Help: "Processes the node's memory guard killed because their container held more GPU memory than its cap (plus its contexts and the tolerance).",
		}, tenantLabels),
		Held: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "volcano_vgpu", Name: "container_memory_held_bytes",
			Help: "GPU memory a container's processes hold on one GPU, as NVML reports it (read by the memory guard each period).",
		}, tenantLabels),
		Unowned: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "volcano_vgpu", Name: "gpu_memory_unowned_bytes",
			Help: "GPU memory held by processes in no container allocated on the GPU (host processes, other device plugins' containers); the guard leaves them alone.",
		}, []string{"gpu_uuid", "gpu_index", "model"}),
		Errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "volcano_vgpu", Name: "memory_guard_errors_total",
			Help: "GPUs the memory guard could not check in a period (what=nvml: NVML running processes failed; maps: a process's memory map could not be read), and kills that failed (kill).",
		}, []string{"gpu_uuid", "what"}),
		Unlimited: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "volcano_vgpu", Name: "container_unlimited_processes",
			Help: "Processes of a container that run on a GPU where its compute share is enforced by libvcuda without libvcuda loaded: nothing holds them to the share (read by the memory guard each period).",
		}, tenantLabels),
		UnlimitedKills: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "volcano_vgpu", Name: "unlimited_process_kills_total",
			Help: "Processes the node's guard killed because they ran on a compute-shared GPU without libvcuda (memoryGuard.unlimitedProcesses: kill).",
		}, tenantLabels),
	}
	reg.MustRegister(m.Kills, m.Held, m.Unowned, m.Errors, m.Unlimited, m.UnlimitedKills)
	return m
}

func tenantValues(t Tenant) []string {
	return []string{t.Namespace, t.Pod, t.Container, t.UUID, strconv.Itoa(t.Index), t.Model}
}
