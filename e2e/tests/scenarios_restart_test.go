//go:build e2e

package tests

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"

	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/reschedule"
	"github.com/volcano-vgpu/volcano-vgpu/e2e/cluster"
	"github.com/volcano-vgpu/volcano-vgpu/e2e/kubeletemu"
)

// burstPods is the burst's mix of 200 pods (cluster-wide, unpinned):
// 8 exclusive, 20 two-GPU, 30 of 8 GiB/20%, 142 of 2 GiB/10%. Cores booked:
// 800+400+600+1420 = 3220 of the cluster's 48 GPUs × 100, so everything fits
// whatever the order.
func burstPods(ns string) []*corev1.Pod {
	var out []*corev1.Pod
	for i := range 200 {
		name := fmt.Sprintf("b%03d", i)
		var p *corev1.Pod
		switch {
		case i%25 == 0:
			p = gpuPod(ns, name, "", 1, 0, 100)
		case i%10 == 1:
			p = gpuPod(ns, name, "", 2, 4096, 10)
		case i%10 == 2 && i < 150:
			p = gpuPod(ns, name, "", 1, 8192, 20)
		default:
			p = gpuPod(ns, name, "", 1, 2048, 10)
		}
		out = append(out, p)
	}
	return out
}

// TestScenarioRestartsDuringBurst: 200 vGPU pods are created by 4 concurrent
// clients while vc-scheduler is killed, then the device plugin of the
// busiest node, then the kubelet emulator (which wipes and recreates every
// kubelet socket, so all plugins re-register); each comes back through
// cluster.Up. Every pod must end bound and Running with its assignment
// allocated and a kubelet record of exactly its GPUs; no GPU may be booked
// beyond its memory, cores or tenants, an exclusive GPU never shared, and
// every device plugin must serve exactly what the assignments book.
func TestScenarioRestartsDuringBurst(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	waitNodeFree(t, ctx, nodeNames()...)
	ns := newNamespace(t, ctx)
	pods := burstPods(ns)

	// Restarts are triggered by creation progress so they land mid-burst.
	type restart struct {
		at   int
		name func() (string, error)
	}
	restarts := []*restart{
		{at: 40, name: func() (string, error) { return "vc-scheduler", nil }},
		{at: 100, name: func() (string, error) {
			n, err := busiestNode(ctx, ns)
			return cluster.DevicePluginName(n), err
		}},
		{at: 150, name: func() (string, error) { return cluster.EmulatorName, nil }},
	}
	trigger := make(chan int, len(pods))
	chaosDone := make(chan error, 1)
	go func() {
		next := 0
		for n := range trigger {
			for next < len(restarts) && n >= restarts[next].at {
				r := restarts[next]
				name, err := r.name()
				if err != nil {
					chaosDone <- err
					return
				}
				start := time.Now()
				pid, err := killComponent(name)
				if err != nil {
					chaosDone <- err
					return
				}
				if err := restartMissing(ctx); err != nil {
					chaosDone <- fmt.Errorf("restarting %s: %w", name, err)
					return
				}
				t.Logf("after %d pods created: killed %s (pid %d), back in %s", n, name, pid, time.Since(start).Round(time.Millisecond))
				next++
			}
		}
		chaosDone <- nil
	}()

	start := time.Now()
	took, err := createPods(ctx, pods, 4, func(n int) {
		trigger <- n
		time.Sleep(300 * time.Millisecond) // ~13 pods/s over 4 clients: a burst that outlasts the restarts
	})
	close(trigger)
	chaosErr := <-chaosDone // before failing: the goroutine logs through t
	if err != nil {
		t.Fatal(err)
	}
	if chaosErr != nil {
		t.Fatal(chaosErr)
	}
	t.Logf("200 pods created in %s", took.Round(time.Millisecond))

	// Every pod is bound, then Running, or failed by kubelet at admission
	// (an Allocate call that died with the plugin) and maybe already deleted
	// by the device plugin (allocate.reschedule) for its controller.
	var bound time.Duration
	waitFor(t, ctx, "all 200 pods bound and Running or failed at admission", func() error {
		pods := listPods(t, ctx, ns)
		running, pending := splitBound(pods)
		failed := 0
		for _, p := range pods {
			if p.Status.Phase == corev1.PodFailed {
				failed++
			}
		}
		if len(pending) > 0 || len(running)+failed+len(handedBack(t, ctx, ns, pods)) != 200 {
			return fmt.Errorf("%d running, %d failed at admission, %d unbound (first unbound: %s)", len(running), failed, len(pending), firstReason(pending))
		}
		bound = time.Since(start)
		return nil
	})
	if n := replaceCrashRejected(t, ctx, ns, pods); n > 0 {
		t.Logf("%d pods rejected by the kubelet emulator because their Allocate call died with the device plugin were replaced, as their controller would", n)
		waitFor(t, ctx, "replacements bound and Running", func() error {
			if running, _ := splitBound(listPods(t, ctx, ns)); len(running) != 200 {
				return fmt.Errorf("%d running", len(running))
			}
			return nil
		})
	}
	running := listPods(t, ctx, ns)
	allocated := waitAllAllocated(t, ctx, running)
	t.Logf("burst with 3 restarts: all 200 bound %s and allocated %s after the first creation", bound.Round(100*time.Millisecond), (time.Since(start)).Round(100*time.Millisecond))

	// Every kubelet device ID is held by one container on its node, on the
	// GPUs the assignment names.
	owner := map[string]string{}
	for _, p := range running {
		for c, ids := range checkServed(t, p, allocated[p.Name]) {
			for _, id := range ids {
				key := p.Spec.NodeName + "/" + id
				if other, dup := owner[key]; dup {
					t.Errorf("device %s given to %s and %s/%s", key, other, p.Name, c)
				}
				owner[key] = p.Name + "/" + c
			}
		}
	}
	books := checkNoDoubleBooking(t, ctx)
	exclusive := 0
	for _, b := range books {
		if b.Exclusive {
			exclusive++
		}
	}
	if exclusive != 8 {
		t.Errorf("%d GPUs held exclusively, want the 8 exclusive pods' GPUs", exclusive)
	}
	checkPluginAgrees(t, ctx, nodeNames()...)
}

// busiestNode is the node with most of the namespace's bound pods (the one
// whose device plugin a restart hurts most); the first node if none is bound.
func busiestNode(ctx context.Context, ns string) (string, error) {
	list, err := shared.kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return "", err
	}
	count := map[string]int{}
	for _, p := range list.Items {
		if p.Spec.NodeName != "" {
			count[p.Spec.NodeName]++
		}
	}
	best := nodeNames()[0]
	for n, c := range count {
		if c > count[best] || c == count[best] && n < best {
			best = n
		}
	}
	return best, nil
}

func firstReason(pods []corev1.Pod) string {
	if len(pods) == 0 {
		return "none"
	}
	return pods[0].Name + ": " + unschedulableMessage(pods[0])
}

// replaceCrashRejected waits until the kubelet emulator has a record of every
// pod of ns, then recreates (from specs, by name) the pods it rejected
// because a device plugin call failed at the transport level (the plugin was
// killed mid-call): kubelet fails such a pod (UnexpectedAdmissionError), the
// device plugin deletes it (allocate.reschedule) and its controller creates
// it again; these pods have none, so the test plays the controller. A failed
// pod not yet deleted is deleted here. Any other rejection is left for
// waitAllAllocated to report. It returns how many pods it recreated.
func replaceCrashRejected(t *testing.T, ctx context.Context, ns string, specs []*corev1.Pod) int {
	t.Helper()
	var rejected, gone []string
	waitFor(t, ctx, "a kubelet record of every pod", func() error {
		rejected = rejected[:0]
		pods := listPods(t, ctx, ns)
		for _, p := range pods {
			rec, err := kubeletemu.ReadRecord(shared.cl.Config.SocketDir, p.Spec.NodeName, string(p.UID))
			if err != nil {
				return fmt.Errorf("%s: %v", p.Name, err)
			}
			switch {
			case rec.Admitted:
			case transportError(rec.Error):
				rejected = append(rejected, p.Name)
			case strings.Contains(rec.Error, "no pod matches the device request"):
				// While the kubelet emulator restarts, the plugin's PodResources
				// lookup may fail past allocate.assignmentWait: its
				// GetPreferredAllocation then leaves the choice to kubelet,
				// which may pick IDs on another GPU, and Allocate refuses, as
				// it must (it never guesses). Kubelet fails the pod and its
				// controller replaces it, as for a transport error.
				t.Logf("%s was refused after kubelet picked IDs on another GPU during a restart: %s", p.Name, rec.Error)
				rejected = append(rejected, p.Name)
			}
		}
		gone = handedBack(t, ctx, ns, pods)
		if len(pods)+len(gone) != len(specs) {
			return fmt.Errorf("%d pods and %d deleted by the device plugin, want %d", len(pods), len(gone), len(specs))
		}
		return nil
	})
	byName := map[string]*corev1.Pod{}
	for _, p := range specs {
		byName[p.Name] = p
	}
	for _, name := range rejected {
		t.Logf("replacing %s", name)
		zero := int64(0)
		if err := shared.kube.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
		waitFor(t, ctx, name+" deleted", func() error {
			_, err := shared.kube.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return nil
			}
			return fmt.Errorf("still there (%v)", err)
		})
	}
	for _, name := range append(rejected, gone...) {
		if _, err := shared.kube.CoreV1().Pods(ns).Create(ctx, byName[name].DeepCopy(), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	return len(rejected) + len(gone)
}

// handedBack names the pods of ns (among those not in pods) that the device
// plugin deleted after kubelet failed them at admission: its Event is left.
func handedBack(t *testing.T, ctx context.Context, ns string, pods []corev1.Pod) []string {
	t.Helper()
	evs, err := shared.kube.CoreV1().Events(ns).List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("reason", reschedule.EventReason).String(),
	})
	if err != nil {
		t.Fatal(err)
	}
	present := map[string]bool{}
	for _, p := range pods {
		present[p.Name] = true
	}
	var out []string
	for _, e := range evs.Items {
		if n := e.InvolvedObject.Name; !present[n] && !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	return out
}

// transportError reports whether a kubelet record's error comes from a
// plugin call that died with the plugin process (gRPC Unavailable, or the
// connection torn down mid-call), not from the plugin's answer.
func transportError(msg string) bool {
	for _, s := range []string{"code = Unavailable", "code = Canceled", "transport is closing", "error reading from server", "connection refused"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}
