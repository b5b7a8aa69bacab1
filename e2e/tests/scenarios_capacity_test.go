//go:build e2e

package tests

import (
	"context"
	"testing"
	"time"

	"github.com/volcano-vgpu/volcano-vgpu/api"
)

// TestScenarioFillNodeByMemory: eight half-GPU jobs fill an L4 node (4 GPUs ×
// 23034 MiB) exactly; a ninth task, however small, stays Pending with a reason
// that names the memory shortfall, and nothing on the node is overbooked.
func TestScenarioFillNodeByMemory(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const node = "l4-0"
	waitNodeFree(t, ctx, node)
	ns := newNamespace(t, ctx)

	// 23034 MiB / 2 = 11517 MiB: two tasks per GPU, 8 on the node, 0 MiB left.
	createJob(t, ctx, pinJob(gpuJob(ns, "fill", 8, 1, 11517, 0, nil), node))
	pods := waitPodsRunning(t, ctx, ns, 8)
	perGPU := map[string]int{}
	for _, p := range pods {
		if p.Spec.NodeName != node {
			t.Fatalf("%s on %s, pinned to %s", p.Name, p.Spec.NodeName, node)
		}
		rec := waitAllocated(t, ctx, p)
		checkServed(t, p, rec)
		lc := limiterConfig(t, rec.Containers[0].Response)
		if len(lc.Devices) != 1 || lc.Devices[0].MemoryLimitBytes != 11517<<20 {
			t.Errorf("%s: limiter devices %+v, want one GPU capped at 11517 MiB", p.Name, lc.Devices)
		}
		for _, u := range gpusOf(t, p) {
			perGPU[u]++
		}
	}
	if len(perGPU) != 4 {
		t.Errorf("8 half-GPU tasks on %d GPUs, want all 4: %v", len(perGPU), perGPU)
	}
	for u, n := range perGPU {
		if n != 2 {
			t.Errorf("%s holds %d half-GPU tasks, want 2", u, n)
		}
	}

	// One more: 1 GiB on one GPU no longer fits anywhere on the node.
	createJob(t, ctx, pinJob(gpuJob(ns, "one-more", 1, 1, 1024, 0, nil), node))
	extra := waitJobPod(t, ctx, ns, "one-more")
	// The node's aggregate vgpu-memory (92136 MiB) is used up, so Volcano's
	// resource fit says so before the vgpu plugin's per-GPU reason would.
	msg := waitUnschedulable(t, ctx, ns, extra, "Insufficient volcano.sh/vgpu-memory", "no GPU with 1024 MiB free")
	t.Logf("one more task on the full node: %s", msg)
	waitSchedulerSessions(t, ctx, 3) // it must stay pending through several sessions
	running, pending := splitBound(listPods(t, ctx, ns))
	if len(running) != 8 || len(pending) != 1 {
		t.Fatalf("%d running, %d pending; want the 8 fillers running and one-more pending", len(running), len(pending))
	}
	if p := pending[0]; p.Annotations[api.AssignmentKey] != "" {
		t.Errorf("pending %s carries an assignment", p.Name)
	}
	books := checkNoDoubleBooking(t, ctx)
	for u := range perGPU {
		if b := books[u]; b.MemoryMiB != 23034 {
			t.Errorf("%s: %d MiB booked, want all 23034", u, b.MemoryMiB)
		}
	}
	checkPluginAgrees(t, ctx, node)
}

// TestScenarioExclusiveNeverShares: with a fractional task on one GPU of an
// L4 node, four exclusive (100-core) tasks get the three idle GPUs and the
// fourth waits; a later fractional task joins the shared GPU, never an
// exclusive one; each exclusive container's limiter owns its whole GPU.
func TestScenarioExclusiveNeverShares(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const node = "l4-1"
	waitNodeFree(t, ctx, node)
	ns := newNamespace(t, ctx)

	createJob(t, ctx, pinJob(gpuJob(ns, "frac", 1, 1, 4096, 30, nil), node))
	fracPods := waitPodsRunning(t, ctx, ns, 1)
	shared1 := gpusOf(t, fracPods[0])[0]

	excl := pinJob(gpuJob(ns, "excl", 4, 1, 0, 100, nil), node)
	excl.Spec.MinAvailable = 1 // each task on its own: three fit, one waits
	createJob(t, ctx, excl)
	_, pending := waitSettled(t, ctx, ns, 5, 4, 2*time.Second)
	// 30 + 3×100 of the node's 400 vgpu-cores are booked: the resource fit
	// refuses first; on a node with cores to spare vgpu's reason names the
	// shared GPU.
	msg := waitUnschedulable(t, ctx, ns, pending[0].Name, "Insufficient volcano.sh/vgpu-cores", "exclusive")
	t.Logf("fourth exclusive task: %s", msg)

	createJob(t, ctx, pinJob(gpuJob(ns, "frac2", 1, 1, 4096, 30, nil), node))
	running, _ := waitSettled(t, ctx, ns, 6, 5, time.Second)
	seen := map[string]string{}
	for _, p := range running {
		rec := waitAllocated(t, ctx, p)
		checkServed(t, p, rec)
		a := podAssignment(t, p)
		d := a.Containers[0].Devices[0]
		switch {
		case d.Cores == 100:
			if d.UUID == shared1 {
				t.Errorf("exclusive %s got %s, which a fractional task holds", p.Name, d.UUID)
			}
			if other, dup := seen[d.UUID]; dup {
				t.Errorf("exclusive %s and %s share %s", p.Name, other, d.UUID)
			}
			seen[d.UUID] = p.Name
			lc := limiterConfig(t, rec.Containers[0].Response)
			if lc.Devices[0].CorePercent != 100 || lc.Devices[0].MemoryLimitBytes != 23034<<20 {
				t.Errorf("exclusive %s: limiter %+v, want the whole GPU (100%%, 23034 MiB)", p.Name, lc.Devices[0])
			}
		case d.UUID != shared1:
			t.Errorf("fractional %s got %s, want %s (the only GPU not held exclusively)", p.Name, d.UUID, shared1)
		}
	}
	if len(seen) != 3 {
		t.Errorf("%d exclusive tasks running, want 3", len(seen))
	}
	books := checkNoDoubleBooking(t, ctx)
	if b := books[shared1]; b == nil || len(b.Tenants) != 2 || b.Exclusive {
		t.Errorf("%s: %+v, want the two fractional tasks", shared1, b)
	}
	checkPluginAgrees(t, ctx, node)
}
