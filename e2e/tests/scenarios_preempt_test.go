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

// withPreempt restarts vc-scheduler with the shipped configuration plus
// Volcano's preempt action in its topology-aware mode (README,
// "Preemption"), and restores the shipped one when the test ends. Tests of
// this binary run one at a time, so no other test sees the change.
func withPreempt(t *testing.T, ctx context.Context) {
	t.Helper()
	cfg := &shared.cl.Config
	shipped := cfg.SchedulerConf
	b, err := os.ReadFile(shipped)
	if err != nil {
		t.Fatal(err)
	}
	const actions = `actions: "enqueue, allocate, backfill"`
	if !strings.Contains(string(b), actions) {
		t.Fatalf("%s does not say %s", shipped, actions)
	}
	conf := strings.Replace(string(b), actions, `actions: "enqueue, allocate, preempt, backfill"`, 1) +
		"configurations:\n- name: preempt\n  arguments:\n    enableTopologyAwarePreemption: true\n"
	path := filepath.Join(t.TempDir(), "volcano-scheduler-preempt.conf")
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg.SchedulerConf = path
	if err := shared.cl.RestartScheduler(ctx); err != nil {
		cfg.SchedulerConf = shipped
		t.Fatalf("restart vc-scheduler with preempt: %v", err)
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
