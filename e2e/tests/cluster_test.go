//go:build e2e

package tests

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	batchv1alpha1 "volcano.sh/apis/pkg/apis/batch/v1alpha1"
)

// TestClusterIsReal: a Volcano Job created through the API gets a PodGroup
// and pods from vc-controller-manager, is bound by our vc-scheduler, and its
// pods run on kwok nodes.
func TestClusterIsReal(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ns := newNamespace(t, ctx)
	job := cpuJob(ns, "real", 3)
	if _, err := shared.vc.BatchV1alpha1().Jobs(ns).Create(ctx, job, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "PodGroup of job real", func() error {
		pgs, err := shared.vc.SchedulingV1beta1().PodGroups(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		if len(pgs.Items) != 1 || pgs.Items[0].Spec.MinMember != 3 {
			return fmt.Errorf("want 1 PodGroup with minMember 3, got %d", len(pgs.Items))
		}
		return nil
	})
	pods := waitPodsRunning(t, ctx, ns, 3)
	for _, p := range pods {
		if p.Spec.SchedulerName != "volcano" {
			t.Errorf("pod %s: schedulerName %q", p.Name, p.Spec.SchedulerName)
		}
		node, err := shared.kube.CoreV1().Nodes().Get(ctx, p.Spec.NodeName, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("pod %s bound to %q: %v", p.Name, p.Spec.NodeName, err)
		}
		if node.Annotations["kwok.x-k8s.io/node"] != "fake" {
			t.Errorf("pod %s runs on %s, which kwok does not manage", p.Name, node.Name)
		}
	}
	waitFor(t, ctx, "job real Running", func() error {
		j, err := shared.vc.BatchV1alpha1().Jobs(ns).Get(ctx, "real", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if j.Status.State.Phase != batchv1alpha1.Running {
			return fmt.Errorf("phase %s", j.Status.State.Phase)
		}
		return nil
	})
}

// TestVolcanoAdmission: Volcano's admission webhooks run: a Job without
// scheduler, queue or minAvailable gets Volcano's defaults, and an invalid
// Job is refused with Volcano's message.
func TestVolcanoAdmission(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ns := newNamespace(t, ctx)
	job := cpuJob(ns, "defaults", 2)
	job.Spec.SchedulerName, job.Spec.Queue, job.Spec.MinAvailable = "", "", 0
	got, err := shared.vc.BatchV1alpha1().Jobs(ns).Create(ctx, job, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Spec.SchedulerName != "volcano" || got.Spec.Queue != "default" || got.Spec.MinAvailable != 2 {
		t.Errorf("defaults not applied: scheduler %q queue %q minAvailable %d", got.Spec.SchedulerName, got.Spec.Queue, got.Spec.MinAvailable)
	}
	bad := cpuJob(ns, "bad", 2)
	bad.Spec.MinAvailable = 5
	if _, err := shared.vc.BatchV1alpha1().Jobs(ns).Create(ctx, bad, metav1.CreateOptions{}); err == nil {
		t.Error("a Job with minAvailable 5 > 2 replicas was admitted")
	}
}

// cpuJob is a Volcano Job of n plain CPU pods.
func cpuJob(ns, name string, n int32) *batchv1alpha1.Job {
	return &batchv1alpha1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: batchv1alpha1.JobSpec{
			SchedulerName: "volcano", Queue: "default", MinAvailable: n,
			Tasks: []batchv1alpha1.TaskSpec{{
				Name: "worker", Replicas: n,
				Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
					RestartPolicy: corev1.RestartPolicyNever,
					Containers: []corev1.Container{{
						Name: "main", Image: "busybox",
						Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
							corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("1Gi"),
						}},
					}},
				}},
			}},
		},
	}
}
