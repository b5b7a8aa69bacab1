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

	"github.com/volcano-vgpu/volcano-vgpu/api"
)

// nodeGPUs returns the UUIDs of a simulated node's GPUs, in index order.
func nodeGPUs(t *testing.T, ctx context.Context, node string) []string {
	t.Helper()
	n, err := shared.kube.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	inv, err := api.DecodeInventory(n.Annotations[api.InventoryKey])
	if err != nil {
		t.Fatal(err)
	}
	out := make([]string, len(inv.GPUs))
	for i, g := range inv.GPUs {
		out[i] = g.UUID
	}
	return out
}

// TestDevicePolicyAndUUIDFilter: confined to two GPUs of one node by the UUID
// filter, two small binpack pods share one GPU, two spread pods take one each.
func TestDevicePolicyAndUUIDFilter(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	gpus := nodeGPUs(t, ctx, "a100-80g-1")
	allowed := gpus[6] + "," + gpus[7]
	tests := []struct {
		policy   string
		distinct int // GPUs used by the two pods
	}{
		{"binpack", 1},
		{"spread", 2},
	}
	for _, tc := range tests {
		t.Run(tc.policy, func(t *testing.T) {
			ns := newNamespace(t, ctx)
			job := gpuJob(ns, tc.policy, 2, 1, 1024, 10, map[string]string{
				api.GPUUUIDIncludeKey: allowed, api.DevicePolicyKey: tc.policy,
			})
			if _, err := shared.vc.BatchV1alpha1().Jobs(ns).Create(ctx, job, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			used := map[string]bool{}
			for _, p := range waitPodsRunning(t, ctx, ns, 2) {
				u := podAssignment(t, p).Containers[0].Devices[0].UUID
				if u != gpus[6] && u != gpus[7] {
					t.Errorf("%s got %s, outside the UUID filter %s", p.Name, u, allowed)
				}
				used[u] = true
			}
			if len(used) != tc.distinct {
				t.Errorf("%s: the two pods used %d GPUs, want %d", tc.policy, len(used), tc.distinct)
			}
		})
	}
}

// TestImpossibleRequestExplained: a request no GPU can hold stays Pending and
// the pod's events and condition say why in words a person can act on.
func TestImpossibleRequestExplained(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ns := newNamespace(t, ctx)
	job := gpuJob(ns, "huge", 1, 1, 200*1024, 10, nil) // 200 GiB on one GPU: the largest has 80
	if _, err := shared.vc.BatchV1alpha1().Jobs(ns).Create(ctx, job, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The event names the shortfall on every node and, once, the GPU that
	// came nearest with its numbers.
	waitFor(t, ctx, "a FailedScheduling event naming GPU memory and the nearest GPU", func() error {
		evs, err := shared.kube.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		for _, e := range evs.Items {
			if e.InvolvedObject.Kind == "Pod" && strings.Contains(e.Message, "no GPU with 204800 MiB free") &&
				strings.Contains(e.Message, "; nearest: ") && strings.Contains(e.Message, `asks 204800 MiB`) {
				t.Logf("event: %s", e.Message)
				return nil
			}
		}
		return fmt.Errorf("%d events, none names the memory shortfall and the nearest GPU", len(evs.Items))
	})
	pods, err := shared.kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if p.Spec.NodeName != "" || p.Status.Phase != corev1.PodPending {
			t.Errorf("%s: node %q phase %s, want unbound and Pending", p.Name, p.Spec.NodeName, p.Status.Phase)
		}
	}
}
