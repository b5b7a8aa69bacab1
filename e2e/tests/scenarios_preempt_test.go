//go:build e2e

package tests

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// withActions restarts vc-scheduler with the shipped configuration but the
// given actions line and extra configuration text, and restores the shipped
// one when the test ends. Tests of this binary run one at a time, so no other
// test sees the change.
func withActions(t *testing.T, ctx context.Context, actions, extra string) {
	t.Helper()
	cfg := &shared.cl.Config
	shipped := cfg.SchedulerConf
	b, err := os.ReadFile(shipped)
	if err != nil {
		t.Fatal(err)
	}
	const line = `actions: "enqueue, allocate, backfill"`
	if !strings.Contains(string(b), line) {
		t.Fatalf("%s does not say %s", shipped, line)
	}
	conf := strings.Replace(string(b), line, fmt.Sprintf("actions: %q", actions), 1) + extra
	path := filepath.Join(t.TempDir(), "volcano-scheduler.conf")
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg.SchedulerConf = path
	if err := shared.cl.RestartScheduler(ctx); err != nil {
		cfg.SchedulerConf = shipped
		t.Fatalf("restart vc-scheduler with actions %q: %v", actions, err)
	}
	t.Cleanup(func() {
		cfg.SchedulerConf = shipped
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := shared.cl.RestartScheduler(ctx); err != nil {
			t.Errorf("restore vc-scheduler's configuration: %v", err)
		}
	})
}

// withPreempt: Volcano's preempt action in its topology-aware mode (README,
// "Preemption").
func withPreempt(t *testing.T, ctx context.Context) {
	withActions(t, ctx, "enqueue, allocate, preempt, backfill",
		"configurations:\n- name: preempt\n  arguments:\n    enableTopologyAwarePreemption: true\n")
}

// priorityClass creates a cluster-wide PriorityClass for the test.
func priorityClass(t *testing.T, ctx context.Context, name string, value int32) {
	t.Helper()
	pc := &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Value: value}
	if _, err := shared.kube.SchedulingV1().PriorityClasses().Create(ctx, pc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = shared.kube.SchedulingV1().PriorityClasses().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
}

// TestScenarioPreemptTakesOneGPU: eight low-priority tasks (50 cores each)
// fill an L4 node's 4 GPUs two by two. A high-priority task asks a whole GPU
// (100 cores): the node's vgpu-cores total says evicting any two pods makes
// room, but only the two on one GPU do. Exactly those two are evicted, the
// six others keep running untouched, and the high-priority task runs alone
// on the GPU they left.
func TestScenarioPreemptTakesOneGPU(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const node = "l4-1"
	waitNodeFree(t, ctx, node)
	ns := newNamespace(t, ctx)
	suffix := ns[strings.LastIndex(ns, "-")+1:]
	low, high := "vgpu-e2e-low-"+suffix, "vgpu-e2e-high-"+suffix
	priorityClass(t, ctx, low, 100)
	priorityClass(t, ctx, high, 1000000)
	withPreempt(t, ctx)

	fill := pinJob(gpuJob(ns, "low", 8, 1, 1024, 50, nil), node)
	fill.Spec.MinAvailable = 1
	fill.Spec.PriorityClassName = low
	fill.Spec.Tasks[0].Template.Spec.PriorityClassName = low
	createJob(t, ctx, fill)
	before := map[string]string{} // UID -> GPU
	perGPU := map[string]int{}
	for _, p := range waitPodsRunning(t, ctx, ns, 8) {
		a := podAssignment(t, p)
		gpu := a.Containers[0].Devices[0].UUID
		before[string(p.UID)] = gpu
		perGPU[gpu]++
	}
	if len(perGPU) != 4 {
		t.Fatalf("8 half-GPU tasks on %d GPUs, want 2 on each of 4: %v", len(perGPU), perGPU)
	}

	urgent := pinJob(gpuJob(ns, "urgent", 1, 1, 0, 100, nil), node)
	urgent.Spec.PriorityClassName = high
	urgent.Spec.Tasks[0].Template.Spec.PriorityClassName = high
	createJob(t, ctx, urgent)
	var urgentGPU string
	waitFor(t, ctx, "the high-priority task running", func() error {
		for _, p := range listPods(t, ctx, ns) {
			if strings.HasPrefix(p.Name, "urgent-") && p.Status.Phase == corev1.PodRunning {
				urgentGPU = podAssignment(t, p).Containers[0].Devices[0].UUID
				return nil
			}
		}
		return fmt.Errorf("not running yet")
	})
	var evicted, kept []string
	live := map[string]bool{}
	for _, p := range listPods(t, ctx, ns) {
		if p.DeletionTimestamp == nil && !podDone(p) {
			live[string(p.UID)] = true
		}
	}
	for uid, gpu := range before {
		if live[uid] {
			kept = append(kept, gpu)
			if gpu == urgentGPU {
				t.Errorf("a low-priority pod still runs on %s beside the exclusive task", gpu)
			}
			continue
		}
		evicted = append(evicted, gpu)
	}
	t.Logf("high-priority task on %s; evicted pods were on %v; %d kept", urgentGPU, evicted, len(kept))
	if len(evicted) != 2 || evicted[0] != urgentGPU || evicted[1] != urgentGPU {
		t.Errorf("evicted pods on %v, want exactly the two on %s", evicted, urgentGPU)
	}
	checkNoDoubleBooking(t, ctx)
}

// TestScenarioReclaimLentGPUs: a queue fills every GPU of the cluster with
// whole-GPU tasks while the other queue of equal weight is idle (lent
// capacity). When the other queue's two whole-GPU tasks arrive, Volcano's
// reclaim action takes two GPUs back: exactly two of the borrower's tasks
// are evicted and the lender's two run, each alone on a GPU.
func TestScenarioReclaimLentGPUs(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ns := newNamespace(t, ctx)
	lender, borrower := twoQueues(t, ctx, ns, "lend", 1, "borrow", 1)
	withActions(t, ctx, "enqueue, allocate, reclaim, backfill", "")

	gpus := 0
	for _, n := range shared.cl.Nodes {
		gpus += len(n.GPUs)
	}
	fill := gpuJob(ns, "borrow", int32(gpus), 1, 0, 0, nil) // whole GPUs
	fill.Spec.Queue, fill.Spec.MinAvailable = borrower, 1
	createJob(t, ctx, fill)
	before := map[string]bool{}
	for _, p := range waitPodsRunning(t, ctx, ns, gpus) {
		before[string(p.UID)] = true
	}

	back := gpuJob(ns, "lend", 2, 1, 0, 0, nil)
	back.Spec.Queue, back.Spec.MinAvailable = lender, 2
	createJob(t, ctx, back)
	var lent []corev1.Pod
	waitFor(t, ctx, "the lender's two tasks running", func() error {
		lent = lent[:0]
		for _, p := range listPods(t, ctx, ns) {
			if strings.HasPrefix(p.Name, "lend-") && p.Status.Phase == corev1.PodRunning {
				lent = append(lent, p)
			}
		}
		if len(lent) != 2 {
			return fmt.Errorf("%d running", len(lent))
		}
		return nil
	})
	evicted := 0
	live := map[string]bool{}
	for _, p := range listPods(t, ctx, ns) {
		if p.DeletionTimestamp == nil && !podDone(p) {
			live[string(p.UID)] = true
		}
	}
	for uid := range before {
		if !live[uid] {
			evicted++
		}
	}
	t.Logf("reclaim: %d of the borrower's %d whole-GPU tasks evicted for the lender's 2", evicted, gpus)
	if evicted != 2 {
		t.Errorf("%d borrower tasks evicted, want exactly 2 (one per whole GPU the lender needs)", evicted)
	}
	checkNoDoubleBooking(t, ctx)
}
