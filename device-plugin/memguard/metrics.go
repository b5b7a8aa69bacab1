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
			Help: "GPUs the memory guard could not check in a period (NVML running processes failed), and kills that failed.",
		}, []string{"gpu_uuid", "what"}),
	}
	reg.MustRegister(m.Kills, m.Held, m.Unowned, m.Errors)
	return m
}

func tenantValues(t Tenant) []string {
	return []string{t.Namespace, t.Pod, t.Container, t.UUID, strconv.Itoa(t.Index), t.Model}
}
