//go:build e2e

package tests

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// newNamespace creates a namespace for one test and deletes it afterwards.
func newNamespace(t *testing.T, ctx context.Context) string {
	t.Helper()
	name := strings.ToLower(strings.NewReplacer("/", "-", "_", "-").Replace(t.Name()))
	if len(name) > 50 {
		name = name[:50]
	}
	name = fmt.Sprintf("%s-%d", name, time.Now().UnixNano()%100000)
	_, err := shared.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = shared.vc.BatchV1alpha1().Jobs(name).DeleteCollection(context.Background(), metav1.DeleteOptions{}, metav1.ListOptions{})
		_ = shared.kube.CoreV1().Namespaces().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	return name
}

// waitFor polls check every 200ms until it returns nil or ctx ends.
func waitFor(t *testing.T, ctx context.Context, what string, check func() error) {
	t.Helper()
	var last error
	for {
		if last = check(); last == nil {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v", what, last)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// waitPodsRunning waits until ns has exactly n pods, all bound and Running.
func waitPodsRunning(t *testing.T, ctx context.Context, ns string, n int) []corev1.Pod {
	t.Helper()
	var pods []corev1.Pod
	waitFor(t, ctx, fmt.Sprintf("%d running pods in %s", n, ns), func() error {
		list, err := shared.kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		running := 0
		for _, p := range list.Items {
			if p.Spec.NodeName != "" && p.Status.Phase == corev1.PodRunning {
				running++
			}
		}
		if len(list.Items) != n || running != n {
			return fmt.Errorf("%d pods, %d running", len(list.Items), running)
		}
		pods = list.Items
		return nil
	})
	return pods
}
