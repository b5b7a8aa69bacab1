//go:build e2e

package tests

import (
	"context"
	"fmt"
	"math"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/volcano-vgpu/volcano-vgpu/e2e/cluster"
	"github.com/volcano-vgpu/volcano-vgpu/e2e/containeremu"
)

// containerSeries scrapes node's device plugin and returns, by series name,
// the value of each volcano_vgpu series whose labels name pod.
func containerSeries(ctx context.Context, node, pod string) (map[string]float64, error) {
	idx := slices.Index(nodeNames(), node)
	if idx < 0 {
		return nil, fmt.Errorf("no simulated node %q", node)
	}
	return cluster.PodSeries(ctx, fmt.Sprintf("http://127.0.0.1:%d/metrics", shared.cl.Config.Ports.DevicePluginMetricsOffset+idx), pod, "")
}

// TestUsageMetrics: while a 30% container's workload holds 2048 MiB and
// launches for 6 s, its node's device plugin shows the memory it holds
// (within 1%, by libvcuda's report and by NVML's per-process view) and the share it achieves (the rate of its attributed busy
// seconds over the second half of the run, within ±3 points of what the
// fake driver measured for the workload over the same half); the series go
// when the pod does.
func TestUsageMetrics(t *testing.T) {
	s := runningA30(t, "use", 8192)
	ctx, ns, pod, c, emu := s.ctx, s.ns, s.pod, s.c, s.emu
	const holdMiB, seconds = 2048, 6.0
	series := func() map[string]float64 {
		t.Helper()
		m, err := containerSeries(ctx, pod.Spec.NodeName, pod.Name)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	chainMeasure(t, "usage metrics of a 30% container holding 2048 MiB", func() (bool, string) {
		p, err := emu.StartWorkload(ctx, c, containeremu.Workload{ChunkMiB: 1, MaxAllocMiB: 1, HoldMiB: holdMiB, Seconds: seconds})
		if err != nil {
			t.Fatal(err)
		}
		if err := p.WaitStderr(ctx, containeremu.HoldingMessage); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		time.Sleep(time.Duration(seconds / 2 * float64(time.Second)))
		first, t1 := series(), time.Now()
		time.Sleep(time.Until(start.Add(time.Duration((seconds - 0.3) * float64(time.Second)))))
		last, t2 := series(), time.Now()
		s, err := p.Summary()
		if err != nil {
			t.Fatal(err)
		}
		used := last["volcano_vgpu_container_memory_used_bytes"]
		busy := (last["volcano_vgpu_container_gpu_busy_seconds_total"] - first["volcano_vgpu_container_gpu_busy_seconds_total"]) / t2.Sub(t1).Seconds()
		share := chainShare(s)
		detail := fmt.Sprintf("memory used %.0f MiB (held %d MiB; NVML's view %.0f MiB), achieved share %.1f%% by busy seconds, %.1f%% averaged (target %.0f%%, throttled %v, waits %v), the fake driver's %.1f%%",
			used/(1<<20), holdMiB, last["volcano_vgpu_container_memory_held_bytes"]/(1<<20), 100*busy, 100*last["volcano_vgpu_container_compute_share_achieved_ratio"],
			100*last["volcano_vgpu_container_compute_share_target_ratio"], last["volcano_vgpu_container_compute_throttled"], last["volcano_vgpu_container_launch_waits_total"], 100*share)
		// libvcuda's own report, and NVML's view of the container's process
		// (the node maps it through its cgroup and the pod's container ID)
		held := last["volcano_vgpu_container_memory_held_bytes"]
		memOK := math.Abs(used-holdMiB*(1<<20)) <= 0.01*holdMiB*(1<<20) && math.Abs(held-holdMiB*(1<<20)) <= 0.01*holdMiB*(1<<20)
		return memOK && chainNear(busy, share) && last["volcano_vgpu_container_compute_share_target_ratio"] == 0.30, detail
	})
	if got := series(); got["volcano_vgpu_container_memory_limit_bytes"] != 8192*(1<<20) {
		t.Errorf("memory limit %v, want 8192 MiB", got["volcano_vgpu_container_memory_limit_bytes"])
	}

	// The pod goes: so do its series.
	background := metav1.DeletePropagationBackground
	if err := shared.vc.BatchV1alpha1().Jobs(ns).Delete(ctx, "use", metav1.DeleteOptions{PropagationPolicy: &background}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "the series of "+pod.Name+" to go", func() error {
		if m := series(); len(m) > 0 {
			return fmt.Errorf("%d series left, e.g. %v", len(m), m)
		}
		return nil
	})
}
