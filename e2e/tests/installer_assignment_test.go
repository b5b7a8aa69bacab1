//go:build e2e

package tests

import (
	"context"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/volcano-vgpu/volcano-vgpu/api"
)

// testAssignmentWriters exercises the policy that lets only the scheduler's
// ServiceAccount set, change or remove a pod's assignment: on pod creation,
// on updates and in the Binding (the way the scheduler writes it). Everyone
// else is refused, the cluster admin included.
func testAssignmentWriters(t *testing.T, ctx context.Context, ns, schedSA string) {
	admin := shared.kube
	sched := impersonate(t, ns, schedSA, "")
	node := "installer-e2e-ghost-a"
	value := assignmentValue(t, node)
	dryRun := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	podWith := func(name string, annotations map[string]string) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Annotations: annotations},
			Spec: corev1.PodSpec{
				SchedulerName: "volcano-vgpu-e2e-nobody",
				Containers:    []corev1.Container{{Name: "main", Image: "busybox"}},
			},
		}
	}
	forged := map[string]string{api.AssignmentKey: value}
	createForged := func(c kubernetes.Interface) error {
		_, err := c.CoreV1().Pods(ns).Create(ctx, podWith("forged", forged), dryRun)
		return err
	}
	waitFor(t, ctx, "the assignment policy to take effect", func() error {
		if err := createForged(admin); !isPolicyDenial(err) {
			return fmt.Errorf("creating a pod with an assignment as the admin: %v", err)
		}
		return nil
	})

	patch := func(c kubernetes.Interface, pod, body string) error {
		_, err := c.CoreV1().Pods(ns).Patch(ctx, pod, types.MergePatchType, []byte(body), metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
		return err
	}
	bind := func(c kubernetes.Interface, pod string, annotations map[string]string) error {
		b := &corev1.Binding{
			ObjectMeta: metav1.ObjectMeta{Name: pod, Annotations: annotations},
			Target:     corev1.ObjectReference{Kind: "Node", Name: node},
		}
		return c.CoreV1().Pods(ns).Bind(ctx, b, metav1.CreateOptions{})
	}
	unbound := ghostPod(t, ctx, ns, "assign-unbound", "")
	byAdmin := ghostPod(t, ctx, ns, "assign-bind-admin", "")
	bySched := ghostPod(t, ctx, ns, "assign-bind-scheduler", "")

	// The scheduler binds with the assignment in the Binding, and the
	// apiserver puts it on the pod: the path the scheduler writes it by.
	if err := bind(sched, bySched, forged); err != nil {
		t.Fatalf("binding with an assignment as %s: %v", schedSA, err)
	}
	got, err := admin.CoreV1().Pods(ns).Get(ctx, bySched, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Spec.NodeName != node || got.Annotations[api.AssignmentKey] != value {
		t.Fatalf("after the scheduler's Binding the pod is on %q with assignment %q; want %s with the Binding's", got.Spec.NodeName, got.Annotations[api.AssignmentKey], node)
	}
	other := assignmentPatch(t, "installer-e2e-ghost-b")
	remove := fmt.Sprintf(`{"metadata":{"annotations":{%q:null}}}`, api.AssignmentKey)
	for _, c := range []struct {
		name string
		do   func() error
		deny string // "" allowed; else part of the policy's message
	}{
		{"admin creates a pod carrying one", func() error { return createForged(admin) }, "only the GPU scheduler may set"},
		{"admin sets one on a pending pod", func() error { return patch(admin, unbound, assignmentPatch(t, node)) }, "only the GPU scheduler may set"},
		{"admin binds with one", func() error { return bind(admin, byAdmin, forged) }, "only the GPU scheduler may set"},
		{"admin changes it", func() error { return patch(admin, bySched, other) }, "only the GPU scheduler may change"},
		{"admin removes it", func() error { return patch(admin, bySched, remove) }, "only the GPU scheduler may remove"},
		{"admin changes another annotation of an assigned pod", func() error {
			return patch(admin, bySched, `{"metadata":{"annotations":{"example.com/note":"kept"}}}`)
		}, ""},
		{"scheduler changes it", func() error { return patch(sched, bySched, other) }, ""},
	} {
		t.Run(c.name, func(t *testing.T) { checkPolicyOutcome(t, c.do(), c.deny) })
	}
	if p, err := admin.CoreV1().Pods(ns).Get(ctx, byAdmin, metav1.GetOptions{}); err != nil || p.Spec.NodeName != "" {
		t.Errorf("the admin's refused Binding must leave the pod unbound: node %q, err %v", p.Spec.NodeName, err)
	}
}
