package metrics

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestExposition(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := New(reg, func() Snapshot {
		return Snapshot{
			GPUs:       []GPU{{UUID: "GPU-a", Model: "A100", Index: 0, Healthy: true, MemoryMiB: 1024, AllocatedMemoryMiB: 512, AllocatedCores: 75, Shares: 2, MaxShares: 10}},
			Containers: []Container{{Namespace: "ns", Pod: "p", Container: "c", UUID: "GPU-a", MemoryMiB: 256, Cores: 25}},
			Health:     Health{EventWaitErrors: 3, ProbeFailures: map[string]uint64{"GPU-b": 7}, UnnamedGPUs: 1},
		}
	})
	m.AllocationFailures.WithLabelValues(ReasonAmbiguous).Inc()
	want := `
# HELP volcano_vgpu_allocation_failures_total Allocate calls refused, by reason (bad_request, no_match, ambiguous, internal).
# TYPE volcano_vgpu_allocation_failures_total counter
volcano_vgpu_allocation_failures_total{reason="ambiguous"} 1
# HELP volcano_vgpu_container_cores_limit_ratio Compute share of a container on one GPU (1 = the whole GPU).
# TYPE volcano_vgpu_container_cores_limit_ratio gauge
volcano_vgpu_container_cores_limit_ratio{container="c",gpu_uuid="GPU-a",namespace="ns",pod="p"} 0.25
# HELP volcano_vgpu_container_memory_limit_bytes GPU memory limit of a container on one GPU.
# TYPE volcano_vgpu_container_memory_limit_bytes gauge
volcano_vgpu_container_memory_limit_bytes{container="c",gpu_uuid="GPU-a",namespace="ns",pod="p"} 2.68435456e+08
# HELP volcano_vgpu_gpu_cores_allocated_ratio Compute shares of the containers allocated on the GPU (1 = the whole GPU).
# TYPE volcano_vgpu_gpu_cores_allocated_ratio gauge
volcano_vgpu_gpu_cores_allocated_ratio{gpu_index="0",gpu_uuid="GPU-a",model="A100"} 0.75
# HELP volcano_vgpu_gpu_healthy 1 if the GPU is healthy, 0 after a critical Xid or a failed probe until a probe passes after the quiet period.
# TYPE volcano_vgpu_gpu_healthy gauge
volcano_vgpu_gpu_healthy{gpu_index="0",gpu_uuid="GPU-a",model="A100"} 1
# HELP volcano_vgpu_gpu_memory_allocated_bytes GPU memory limits of the containers allocated on the GPU.
# TYPE volcano_vgpu_gpu_memory_allocated_bytes gauge
volcano_vgpu_gpu_memory_allocated_bytes{gpu_index="0",gpu_uuid="GPU-a",model="A100"} 5.36870912e+08
# HELP volcano_vgpu_gpu_shares Containers allocated on the GPU.
# TYPE volcano_vgpu_gpu_shares gauge
volcano_vgpu_gpu_shares{gpu_index="0",gpu_uuid="GPU-a",model="A100"} 2
# HELP volcano_vgpu_nvml_event_wait_errors_total NVML event set failures; each is retried with backoff while the probes watch the GPUs.
# TYPE volcano_vgpu_nvml_event_wait_errors_total counter
volcano_vgpu_nvml_event_wait_errors_total 3
# HELP volcano_vgpu_gpu_probe_failures_total Failed NVML probes of a GPU (lost, or a reset pending).
# TYPE volcano_vgpu_gpu_probe_failures_total counter
volcano_vgpu_gpu_probe_failures_total{gpu_uuid="GPU-b"} 7
# HELP volcano_vgpu_gpus_unnamed GPUs NVML counts but cannot name; they are missing from the inventory until a restart.
# TYPE volcano_vgpu_gpus_unnamed gauge
volcano_vgpu_gpus_unnamed 1
`
	names := []string{"volcano_vgpu_allocation_failures_total", "volcano_vgpu_container_cores_limit_ratio", "volcano_vgpu_container_memory_limit_bytes",
		"volcano_vgpu_gpu_cores_allocated_ratio", "volcano_vgpu_gpu_healthy", "volcano_vgpu_gpu_memory_allocated_bytes", "volcano_vgpu_gpu_shares",
		"volcano_vgpu_nvml_event_wait_errors_total", "volcano_vgpu_gpu_probe_failures_total", "volcano_vgpu_gpus_unnamed"}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), names...); err != nil {
		t.Error(err)
	}
	if problems, err := testutil.GatherAndLint(reg); err != nil || len(problems) != 0 {
		t.Errorf("lint: %v %v", problems, err)
	}
}
