package metrics

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/volcano-vgpu/volcano-vgpu/api"
	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/usage"
)

func TestExposition(t *testing.T) {
	reg := prometheus.NewRegistry()
	used := uint64(100 * mib)
	m := New(reg, func() Snapshot {
		return Snapshot{
			GPUs: []GPU{{UUID: "GPU-a", Model: "A100", Index: 0, Healthy: true, MemoryMiB: 1024, AllocatedMemoryMiB: 512, AllocatedCores: 75, Shares: 2, MaxShares: 10,
				UsedMemoryBytes: 100 * mib, StrandedMiB: 64, Compute: &usage.GPU{Busy: 0.5, BusySeconds: 12}}},
			Containers: []Container{
				{Namespace: "ns", Pod: "p", Container: "c", UUID: "GPU-a", Model: "A100", MemoryMiB: 256, Cores: 25, Policy: api.ComputeFixed,
					MemoryUsed: &used, Report: &api.UsageDevice{Launched: 10, Waits: 4}, Compute: &usage.Tenant{Target: 0.25, Achieved: 0.24, BusySeconds: 6, Limited: true}},
				// nothing measured yet: only the limits
				{Namespace: "ns", Pod: "q", Container: "c", UUID: "GPU-a", Model: "A100", MemoryMiB: 256, Cores: 50},
			},
			InventoryPublished: time.Unix(1700000000, 500000000),
			Health:             Health{EventWaitErrors: 3, ProbeFailures: map[string]uint64{"GPU-b": 7}, UnnamedGPUs: 1},
		}
	})
	m.AllocationFailures.WithLabelValues(ReasonAmbiguous).Inc()
	want := `
# HELP volcano_vgpu_allocation_failures_total Allocate calls refused, by reason (bad_request, no_match, ambiguous, unverified, mig, internal).
# TYPE volcano_vgpu_allocation_failures_total counter
volcano_vgpu_allocation_failures_total{reason="ambiguous"} 1
# HELP volcano_vgpu_container_cores_limit_ratio Compute share of a container on one GPU (1 = the whole GPU).
# TYPE volcano_vgpu_container_cores_limit_ratio gauge
volcano_vgpu_container_cores_limit_ratio{container="c",gpu_index="0",gpu_uuid="GPU-a",model="A100",namespace="ns",pod="p"} 0.25
volcano_vgpu_container_cores_limit_ratio{container="c",gpu_index="0",gpu_uuid="GPU-a",model="A100",namespace="ns",pod="q"} 0.5
# HELP volcano_vgpu_container_memory_limit_bytes GPU memory limit of a container on one GPU.
# TYPE volcano_vgpu_container_memory_limit_bytes gauge
volcano_vgpu_container_memory_limit_bytes{container="c",gpu_index="0",gpu_uuid="GPU-a",model="A100",namespace="ns",pod="p"} 2.68435456e+08
volcano_vgpu_container_memory_limit_bytes{container="c",gpu_index="0",gpu_uuid="GPU-a",model="A100",namespace="ns",pod="q"} 2.68435456e+08
# HELP volcano_vgpu_container_memory_used_bytes GPU memory a container's processes have booked through libvcuda on one GPU (the container's own report, clamped to the GPU's memory; container_memory_held_bytes is NVML's view).
# TYPE volcano_vgpu_container_memory_used_bytes gauge
volcano_vgpu_container_memory_used_bytes{container="c",gpu_index="0",gpu_uuid="GPU-a",model="A100",namespace="ns",pod="p"} 1.048576e+08
# HELP volcano_vgpu_container_compute_share_achieved_ratio Busy fraction of the GPU the compute controller attributes to a container, averaged over about 2 s.
# TYPE volcano_vgpu_container_compute_share_achieved_ratio gauge
volcano_vgpu_container_compute_share_achieved_ratio{container="c",gpu_index="0",gpu_uuid="GPU-a",model="A100",namespace="ns",pod="p"} 0.24
# HELP volcano_vgpu_container_compute_share_target_ratio The compute controller's target share for a container this period (1 = the whole GPU; balance: with capacity lent by idle tenants).
# TYPE volcano_vgpu_container_compute_share_target_ratio gauge
volcano_vgpu_container_compute_share_target_ratio{container="c",gpu_index="0",gpu_uuid="GPU-a",model="A100",namespace="ns",pod="p"} 0.25
# HELP volcano_vgpu_container_compute_throttled 1 while the compute controller admits a container's launches only within an allowance, 0 while it lets them run freely.
# TYPE volcano_vgpu_container_compute_throttled gauge
volcano_vgpu_container_compute_throttled{container="c",gpu_index="0",gpu_uuid="GPU-a",model="A100",namespace="ns",pod="p"} 1
# HELP volcano_vgpu_container_gpu_busy_seconds_total GPU busy time the compute controller attributes to a container.
# TYPE volcano_vgpu_container_gpu_busy_seconds_total counter
volcano_vgpu_container_gpu_busy_seconds_total{container="c",gpu_index="0",gpu_uuid="GPU-a",model="A100",namespace="ns",pod="p"} 6
# HELP volcano_vgpu_container_launch_waits_total Kernel launches of a container that waited for allowance (the container's own report).
# TYPE volcano_vgpu_container_launch_waits_total counter
volcano_vgpu_container_launch_waits_total{container="c",gpu_index="0",gpu_uuid="GPU-a",model="A100",namespace="ns",pod="p"} 4
# HELP volcano_vgpu_container_compute_policy 1 for the compute policy (fixed, balance, none) of a container on one GPU.
# TYPE volcano_vgpu_container_compute_policy gauge
volcano_vgpu_container_compute_policy{container="c",gpu_index="0",gpu_uuid="GPU-a",model="A100",namespace="ns",pod="p",policy="fixed"} 1
# HELP volcano_vgpu_inventory_published_timestamp_seconds When the device plugin last published the node's inventory (its heartbeat); the scheduler places nothing on a node whose heartbeat is older than its vgpu.staleAfter.
# TYPE volcano_vgpu_inventory_published_timestamp_seconds gauge
volcano_vgpu_inventory_published_timestamp_seconds 1.7000000005e+09
# HELP volcano_vgpu_gpu_busy_ratio Busy fraction of the GPU measured by the node's compute controller (NVML), averaged over about 2 s.
# TYPE volcano_vgpu_gpu_busy_ratio gauge
volcano_vgpu_gpu_busy_ratio{gpu_index="0",gpu_uuid="GPU-a",model="A100"} 0.5
# HELP volcano_vgpu_gpu_busy_seconds_total Busy time of the GPU measured by the node's compute controller while it had tenants.
# TYPE volcano_vgpu_gpu_busy_seconds_total counter
volcano_vgpu_gpu_busy_seconds_total{gpu_index="0",gpu_uuid="GPU-a",model="A100"} 12
# HELP volcano_vgpu_gpu_memory_used_bytes GPU memory the containers allocated on the GPU have booked through libvcuda (their own reports, each clamped to the GPU's memory).
# TYPE volcano_vgpu_gpu_memory_used_bytes gauge
volcano_vgpu_gpu_memory_used_bytes{gpu_index="0",gpu_uuid="GPU-a",model="A100"} 1.048576e+08
# HELP volcano_vgpu_gpu_memory_stranded_bytes Free GPU memory no later tenant could use: the cores or tenant slots run out first at the present tenants' proportions.
# TYPE volcano_vgpu_gpu_memory_stranded_bytes gauge
volcano_vgpu_gpu_memory_stranded_bytes{gpu_index="0",gpu_uuid="GPU-a",model="A100"} 6.7108864e+07
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
		"volcano_vgpu_container_memory_used_bytes", "volcano_vgpu_container_compute_share_achieved_ratio", "volcano_vgpu_container_compute_share_target_ratio",
		"volcano_vgpu_container_compute_throttled", "volcano_vgpu_container_gpu_busy_seconds_total", "volcano_vgpu_container_launch_waits_total",
		"volcano_vgpu_container_compute_policy", "volcano_vgpu_gpu_busy_ratio", "volcano_vgpu_gpu_busy_seconds_total", "volcano_vgpu_gpu_memory_used_bytes",
		"volcano_vgpu_gpu_memory_stranded_bytes", "volcano_vgpu_inventory_published_timestamp_seconds",
		"volcano_vgpu_gpu_cores_allocated_ratio", "volcano_vgpu_gpu_healthy", "volcano_vgpu_gpu_memory_allocated_bytes", "volcano_vgpu_gpu_shares",
		"volcano_vgpu_nvml_event_wait_errors_total", "volcano_vgpu_gpu_probe_failures_total", "volcano_vgpu_gpus_unnamed"}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), names...); err != nil {
		t.Error(err)
	}
	if problems, err := testutil.GatherAndLint(reg); err != nil || len(problems) != 0 {
		t.Errorf("lint: %v %v", problems, err)
	}
}

func TestAllocationReasonsAreDistinctLabels(t *testing.T) {
	seen := map[string]bool{}
	for _, r := range AllocationReasons() {
		if r == "" || strings.ToLower(r) != r || strings.ContainsAny(r, " ,") || seen[r] {
			t.Errorf("reason %q: want distinct lower-case label values", r)
		}
		seen[r] = true
	}
	for _, r := range []string{ReasonBadRequest, ReasonNoMatch, ReasonAmbiguous, ReasonInternal, ReasonUnverified, ReasonMIG} {
		if !seen[r] {
			t.Errorf("reason %q is missing from AllocationReasons", r)
		}
	}
}
