//go:build e2e

package tests

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	batchv1alpha1 "volcano.sh/apis/pkg/apis/batch/v1alpha1"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"

	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/reschedule"
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
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	const down, up = "l4-0", "l4-1"
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

	// The first pod is refused, failed by kubelet, then handed back.
	var failed corev1.Pod
	waitFor(t, ctx, first+" failed at admission", func() error {
		p, err := shared.kube.CoreV1().Pods(ns).Get(ctx, first, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if p.Status.Phase != corev1.PodFailed {
			rec, rerr := kubeletemu.ReadRecord(base, p.Spec.NodeName, string(p.UID))
			return fmt.Errorf("phase %s on %q; kubelet record: admitted %t, error %q (%v)", p.Status.Phase, p.Spec.NodeName, rec.Admitted, rec.Error, rerr)
		}
		failed = *p
		return nil
	})
	if failed.Status.Reason != reschedule.AdmissionReason {
		t.Errorf("%s failed with reason %q, want %s", first, failed.Status.Reason, reschedule.AdmissionReason)
	}
	for _, want := range []string{"cannot verify the pod", "PodResources", "kubelet.podResourcesSocket"} {
		if !strings.Contains(failed.Status.Message, want) {
			t.Errorf("kubelet's message for %s does not say %q: %s", first, want, failed.Status.Message)
		}
	}
	rec, err := kubeletemu.ReadRecord(base, down, string(failed.UID))
	if err != nil || rec.Admitted {
		t.Fatalf("kubelet record of %s: admitted %t, err %v", first, rec.Admitted, err)
	}
	waitFor(t, ctx, "the device plugin's event and deletion of "+first, func() error {
		evs, err := shared.kube.CoreV1().Events(ns).List(ctx, metav1.ListOptions{
			FieldSelector: fields.OneTermEqualSelector("involvedObject.uid", string(failed.UID)).String(),
		})
		if err != nil {
			return err
		}
		var ours *corev1.Event
		for i, e := range evs.Items {
			if e.Reason == reschedule.EventReason {
				ours = &evs.Items[i]
			}
		}
		if ours == nil {
			return fmt.Errorf("no %s event among %d", reschedule.EventReason, len(evs.Items))
		}
		if !strings.Contains(ours.Message, "Job resched") || ours.Source.Host != down {
			t.Errorf("event from %q says %q; want it from %s naming the Job", ours.Source.Host, ours.Message, down)
		}
		p, err := shared.kube.CoreV1().Pods(ns).Get(ctx, first, metav1.GetOptions{})
		if err == nil && p.UID == failed.UID {
			return fmt.Errorf("%s not deleted yet", first)
		}
		return nil
	})

	// The Job's controller creates the pod again; with the API back it runs.
	if err := kubeletemu.SetPodResourcesDown(base, down, false); err != nil {
		t.Fatal(err)
	}
	pods := waitJobRunning(t, ctx, ns, "resched", 2)
	for _, p := range pods {
		if p.Name == first && (p.UID == failed.UID || p.Spec.NodeName != down) {
			t.Errorf("%s runs as uid %s on %s; want a new pod on %s", first, p.UID, p.Spec.NodeName, down)
		}
	}
	waitJobPhase(t, ctx, ns, "resched", batchv1alpha1.Running)
	checkNoDoubleBooking(t, ctx)
}
