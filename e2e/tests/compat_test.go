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
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/volcano-vgpu/volcano-vgpu/api"
)

// TestVolcanoVGPUExamples: Volcano's own vGPU examples (docs/user-guide/
// how_to_use_volcano_vgpu.md) behave as Volcano documents them: the Dynamic
// MIG pod stays pending while no GPU is in MIG mode, with a reason naming the
// mode; a pod whose volcano.sh/vgpu-use-gpuuuid names one GPU lands there;
// volcano.sh/vgpu-nouse-gpuuuid keeps a pod off the GPUs it names.
func TestVolcanoVGPUExamples(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	nodes, err := shared.kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var gpus []string // the GPUs of one node with at least two
	for _, n := range nodes.Items {
		if v, ok := n.Annotations[api.InventoryKey]; ok {
			inv, err := api.DecodeInventory(v)
			if err == nil && len(inv.GPUs) >= 2 {
				for _, g := range inv.GPUs {
					gpus = append(gpus, g.UUID)
				}
				break
			}
		}
	}
	if len(gpus) < 2 {
		t.Fatal("no node publishes an inventory with 2 GPUs")
	}

	t.Run("Dynamic MIG example stays pending on time-sliced GPUs", func(t *testing.T) {
		ns := newNamespace(t, ctx)
		job := gpuJob(ns, "mig", 1, 1, 3000, 0, map[string]string{api.VolcanoModeKey: "mig"})
		if _, err := shared.vc.BatchV1alpha1().Jobs(ns).Create(ctx, job, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		const want = "volcano.sh/vgpu-mode: mig: no GPU in mig mode on this node"
		waitFor(t, ctx, "an unschedulable reason naming the mode", func() error {
			pods, err := shared.kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
			if err != nil {
				return err
			}
			for _, p := range pods.Items {
				for _, c := range p.Status.Conditions {
					if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && strings.Contains(c.Message, want) {
						return nil
					}
				}
			}
			return fmt.Errorf("no pod has a PodScheduled=False condition with %q yet", want)
		})
		waitSchedulerSessions(t, ctx, 2)
		pods, err := shared.kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range pods.Items {
			if p.Spec.NodeName != "" {
				t.Errorf("%s asked MIG and was bound to %s", p.Name, p.Spec.NodeName)
			}
		}
	})

	t.Run("vgpu-use-gpuuuid naming one GPU lands there", func(t *testing.T) {
		ns := newNamespace(t, ctx)
		job := gpuJob(ns, "pinned", 1, 1, 1024, 5, map[string]string{api.VolcanoUUIDIncludeKey: gpus[1]})
		if _, err := shared.vc.BatchV1alpha1().Jobs(ns).Create(ctx, job, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		p := waitPodsRunning(t, ctx, ns, 1)[0]
		if got := podAssignment(t, p).Containers[0].Devices; len(got) != 1 || got[0].UUID != gpus[1] {
			t.Errorf("%s got %+v, want %s", p.Name, got, gpus[1])
		}
		resp := waitAllocated(t, ctx, p).Containers[0].Response
		if got := resp.GPUs(); !slices.Equal(got, []string{gpus[1]}) {
			t.Errorf("%s: the device plugin gives GPUs %v, want %s", p.Name, got, gpus[1])
		}
	})

	t.Run("vgpu-nouse-gpuuuid keeps a pod off the GPUs it names", func(t *testing.T) {
		ns := newNamespace(t, ctx)
		// Allowed: the node's first two GPUs; denied: the first.
		job := gpuJob(ns, "deny", 1, 1, 1024, 5, map[string]string{
			api.VolcanoUUIDIncludeKey: gpus[0] + "," + gpus[1], api.VolcanoUUIDExcludeKey: gpus[0]})
		if _, err := shared.vc.BatchV1alpha1().Jobs(ns).Create(ctx, job, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		p := waitPodsRunning(t, ctx, ns, 1)[0]
		got := podAssignment(t, p).Containers[0].Devices
		if len(got) != 1 || got[0].UUID != gpus[1] {
			t.Errorf("%s got %+v, want %s (%s is denied)", p.Name, got, gpus[1], gpus[0])
		}
	})
}
