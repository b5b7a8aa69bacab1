//go:build e2e

package tests

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/volcano-vgpu/volcano-vgpu/api"
	"github.com/volcano-vgpu/volcano-vgpu/e2e/cluster"
)

// TestScenarioPluginRestartState: what a device plugin restores from its
// state directory after a crash matches the API at once, not one GC period
// (allocate.gcPeriod, 1 minute) later, and comes from its own records on the
// node, not from anything written on pods:
//   - a pod deleted before the crash is not counted as served any more
//     (metrics, and the ledger PreStart reads);
//   - a pod still running is counted as served, and its assignment is the
//     scheduler's value, untouched by the plugin before or after the restart.
func TestScenarioPluginRestartState(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const node = "l4-0"
	waitNodeFree(t, ctx, node)
	ns := newNamespace(t, ctx)

	gone := runPod(t, ctx, gpuPod(ns, "gone", node, 1, 1024, 10))
	kept := runPod(t, ctx, gpuPod(ns, "kept", node, 1, 2048, 20))
	if err := shared.kube.CoreV1().Pods(ns).Delete(ctx, gone.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitServedOnly(t, ctx, node, []corev1.Pod{kept})
	if a := podAssignment(t, kept); a.Phase != api.PhaseAssigned {
		t.Errorf("assignment of %s after the device plugin served it: phase %q, want the scheduler's %q", kept.Name, a.Phase, api.PhaseAssigned)
	}

	if _, err := killComponent(cluster.DevicePluginName(node)); err != nil {
		t.Fatal(err)
	}
	restarted := time.Now()
	if err := restartMissing(ctx); err != nil {
		t.Fatal(err)
	}
	// Well inside the first GC tick of the new process.
	soon, cancelSoon := context.WithTimeout(ctx, 20*time.Second)
	defer cancelSoon()
	waitServedOnly(t, soon, node, []corev1.Pod{kept})
	t.Logf("restored state matched the API %s after the restart began", time.Since(restarted).Round(100*time.Millisecond))
	checkPluginAgrees(t, ctx, node)
	cur, err := shared.kube.CoreV1().Pods(ns).Get(ctx, kept.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := cur.Annotations[api.AssignmentKey], kept.Annotations[api.AssignmentKey]; got != want {
		t.Errorf("assignment of %s changed across the restart:\n  was %s\n  now %s", kept.Name, want, got)
	}
}

// TestScenarioKubeletRestartWithHistory: a kubelet (emulator) restart must
// not let devices of pods deleted before the restart block new pods. An L4
// node's 40 vgpu-number replicas are all used by 40 pods, which are then
// deleted; the emulator is killed, 4 pods are bound to the node while it is
// down, and after the restart each must be admitted on its assigned GPU
// (kubelet's checkpoint of the deleted pods is dropped before admitting, as
// kubelet's device manager drops inactive pods before every allocation).
func TestScenarioKubeletRestartWithHistory(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const node = "l4-1" // 4 GPUs × maxShares 10
	waitNodeFree(t, ctx, node)
	ns := newNamespace(t, ctx)

	var history []*corev1.Pod
	for i := range 40 {
		history = append(history, gpuPod(ns, fmt.Sprintf("old%02d", i), node, 1, 512, 10))
	}
	if _, err := createPods(ctx, history, 4, nil); err != nil {
		t.Fatal(err)
	}
	for _, p := range waitPodsRunning(t, ctx, ns, 40) {
		waitAllocated(t, ctx, p)
	}
	if err := shared.kube.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "the 40 pods gone", func() error {
		if n := len(listPods(t, ctx, ns)); n > 0 {
			return fmt.Errorf("%d left", n)
		}
		return nil
	})
	waitNodeFree(t, ctx, node)

	if _, err := killComponent(cluster.EmulatorName); err != nil {
		t.Fatal(err)
	}
	var fresh []*corev1.Pod
	for i := range 4 {
		fresh = append(fresh, gpuPod(ns, fmt.Sprintf("new%d", i), node, 1, 512, 10))
	}
	if _, err := createPods(ctx, fresh, 4, nil); err != nil {
		t.Fatal(err)
	}
	var pods []corev1.Pod
	waitFor(t, ctx, "the 4 new pods running", func() error { // kwok runs them; no kubelet has admitted them yet
		running, _ := splitBound(listPods(t, ctx, ns))
		if len(running) != 4 {
			return fmt.Errorf("%d running", len(running))
		}
		pods = running
		return nil
	})
	if err := restartMissing(ctx); err != nil {
		t.Fatal(err)
	}
	recs := waitAllAllocated(t, ctx, pods)
	for _, p := range pods {
		checkServed(t, p, recs[p.Name])
	}
}
