//go:build e2e

package tests

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	batchv1alpha1 "volcano.sh/apis/pkg/apis/batch/v1alpha1"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/volcano-vgpu/volcano-vgpu/e2e/kubeletemu"
)

// TestScenarioUnverifiedAllocateRescheduled: kubelet's PodResources API on
// one node stops answering (as while kubelet restarts). A Volcano Job of two
// tasks, one pinned to that node and one to another: the device plugin
// cannot tell which pod the first Allocate is for and, after
// allocate.assignmentWait, refuses it with an error that names the API and
// the fix; it never guesses from assignments alone. Kubelet fails the pod
// (UnexpectedAdmissionError). The device plugin (allocate.reschedule, on in
// the local cluster) posts an Event saying why and deletes the pod; the Job's
// controller creates it again. Once the API answers, the new pod runs, and
// the Job never failed.
func TestScenarioUnverifiedAllocateRescheduled(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	const down, up = "l4-0", "l4-1"
	waitNodeFree(t, ctx, down, up) // earlier tests' pods may still be going
	ns := newNamespace(t, ctx)
	base := shared.cl.Config.SocketDir
	if err := kubeletemu.SetPodResourcesDown(base, down, true); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = kubeletemu.SetPodResourcesDown(base, down, false) })

	job := gpuJob(ns, "resched", 1, 1, 2048, 20, nil)
	second := job.Spec.Tasks[0].DeepCopy()
	second.Name = "other"
	job.Spec.Tasks = append(job.Spec.Tasks, *second)
	job.Spec.MinAvailable = 2
	job.Spec.Tasks[0].Template.Spec.NodeSelector = map[string]string{hostnameKey: down}
	job.Spec.Tasks[1].Template.Spec.NodeSelector = map[string]string{hostnameKey: up}
	createJob(t, ctx, job)
	first := "resched-worker-0"

	// The first pod is refused, failed by kubelet, then handed back: the
	// device plugin's Event carries kubelet's message. (While the API stays
	// down each new incarnation is refused in turn, so the test reads the
	// Event rather than catch a pod in its brief Failed phase.)
	ev := rescheduleEvent(t, ctx, ns, first)
	for _, want := range []string{"cannot verify the pod", "PodResources", "kubelet.podResourcesSocket", "Job resched"} {
		if !strings.Contains(ev.Message, want) {
			t.Errorf("the event on %s does not say %q: %s", first, want, ev.Message)
		}
	}
	if ev.Source.Host != down {
		t.Errorf("event from %q, want the device plugin of %s", ev.Source.Host, down)
	}
	failedUID := ev.InvolvedObject.UID
	rec, err := kubeletemu.ReadRecord(base, down, string(failedUID))
	if err != nil || rec.Admitted || !strings.Contains(rec.Error, "cannot verify the pod") {
		t.Errorf("kubelet record of %s (uid %s): admitted %t, error %q (%v); want refused as unverified", first, failedUID, rec.Admitted, rec.Error, err)
	}
	waitFor(t, ctx, "the failed "+first+" deleted", func() error {
		p, err := shared.kube.CoreV1().Pods(ns).Get(ctx, first, metav1.GetOptions{})
		if err == nil && p.UID == failedUID {
			return fmt.Errorf("still there, phase %s", p.Status.Phase)
		}
		return nil
	})

	// The Job's controller creates the pod again; with the API back it runs.
	if err := kubeletemu.SetPodResourcesDown(base, down, false); err != nil {
		t.Fatal(err)
	}
	pods := waitJobRunning(t, ctx, ns, "resched", 2)
	for _, p := range pods {
		if p.Name == first && (p.UID == failedUID || p.Spec.NodeName != down) {
			t.Errorf("%s runs as uid %s on %s; want a new pod on %s", first, p.UID, p.Spec.NodeName, down)
		}
	}
	waitJobPhase(t, ctx, ns, "resched", batchv1alpha1.Running)
	checkNoDoubleBooking(t, ctx)
}
