//go:build e2e

package tests

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	batchv1alpha1 "volcano.sh/apis/pkg/apis/batch/v1alpha1"

	"github.com/volcano-vgpu/volcano-vgpu/api"
	"github.com/volcano-vgpu/volcano-vgpu/e2e/kubeletemu"
)

// gpuJob is a Volcano Job of n tasks, each one container asking number GPUs
// with memMiB and cores on each; annotations go on the pod template.
func gpuJob(ns, name string, n int32, number, memMiB, cores int64, annotations map[string]string) *batchv1alpha1.Job {
	job := cpuJob(ns, name, n)
	tmpl := &job.Spec.Tasks[0].Template
	tmpl.Annotations = annotations
	limits := corev1.ResourceList{api.DefaultResourceNumber: *resource.NewQuantity(number, resource.DecimalSI)}
	if memMiB > 0 {
		limits[api.DefaultResourceMemory] = *resource.NewQuantity(memMiB, resource.DecimalSI)
	}
	if cores > 0 {
		limits[api.DefaultResourceCores] = *resource.NewQuantity(cores, resource.DecimalSI)
	}
	tmpl.Spec.Containers[0].Resources.Limits = limits
	return job
}

func podAssignment(t *testing.T, p corev1.Pod) api.Assignment {
	t.Helper()
	v, ok := p.Annotations[api.AssignmentKey]
	if !ok {
		t.Fatalf("pod %s runs on %s without a GPU assignment", p.Name, p.Spec.NodeName)
	}
	a, err := api.DecodeAssignment(v)
	if err != nil {
		t.Fatalf("pod %s: %v", p.Name, err)
	}
	return a
}

// waitAllocated waits until the kubelet emulator has admitted the pod (the
// device plugin served every container of it) and returns its record.
func waitAllocated(t *testing.T, ctx context.Context, p corev1.Pod) kubeletemu.Record {
	t.Helper()
	var rec kubeletemu.Record
	waitFor(t, ctx, "device plugin allocation of "+p.Name, func() error {
		var err error
		rec, err = kubeletemu.ReadRecord(shared.cl.Config.SocketDir, p.Spec.NodeName, string(p.UID))
		if err != nil {
			return err
		}
		if !rec.Admitted {
			return fmt.Errorf("not admitted: %s", rec.Error)
		}
		return nil
	})
	return rec
}

// TestVGPUJobEndToEnd: a fractional vGPU Volcano Job is placed by our
// scheduler, served by the device plugin through the kubelet emulator, and
// each container gets exactly its GPU and a limiter config with its limits.
func TestVGPUJobEndToEnd(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ns := newNamespace(t, ctx)
	job := gpuJob(ns, "frac", 2, 1, 8192, 30, nil)
	if _, err := shared.vc.BatchV1alpha1().Jobs(ns).Create(ctx, job, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, p := range waitPodsRunning(t, ctx, ns, 2) {
		a := podAssignment(t, p)
		if a.Node != p.Spec.NodeName || a.PodUID != string(p.UID) {
			t.Errorf("%s: assignment for %s/%s, pod is %s/%s", p.Name, a.Node, a.PodUID, p.Spec.NodeName, p.UID)
		}
		dev := a.Containers[0].Devices
		if len(dev) != 1 || dev[0].MemoryMiB != 8192 || dev[0].Cores != 30 {
			t.Fatalf("%s: assignment %+v, want one GPU with 8192 MiB and 30%%", p.Name, dev)
		}
		rec := waitAllocated(t, ctx, p)
		resp := rec.Containers[0].Response
		if got := resp.GPUs(); !slices.Equal(got, []string{dev[0].UUID}) {
			t.Errorf("%s: the answer gives GPUs %v (CDI devices %v, %s=%q), want the assigned %s", p.Name, got, resp.CDIDevices, api.EnvVisibleDevices, resp.Envs[api.EnvVisibleDevices], dev[0].UUID)
		}
		var cfgPath string
		for _, m := range resp.Mounts {
			if strings.HasSuffix(m.ContainerPath, "vcuda.config") {
				if !m.ReadOnly {
					t.Errorf("%s: limiter config mounted read-write", p.Name)
				}
				cfgPath = m.HostPath
			}
		}
		data, err := os.ReadFile(cfgPath)
		if err != nil {
			t.Fatalf("%s: limiter config: %v", p.Name, err)
		}
		lc, err := api.DecodeLimiterConfig(data)
		if err != nil {
			t.Fatal(err)
		}
		if len(lc.Devices) != 1 || lc.Devices[0].UUID != dev[0].UUID || lc.Devices[0].MemoryLimitBytes != 8192<<20 || lc.Devices[0].CorePercent != 30 {
			t.Errorf("%s: limiter config devices %+v, want %s with 8 GiB and 30%%", p.Name, lc.Devices, dev[0].UUID)
		}
		if lc.PodUID != string(p.UID) {
			t.Errorf("%s: limiter config for pod %s", p.Name, lc.PodUID)
		}
	}
}

// TestGangGetsNVLinkPairs: a 4-task gang with 2 GPUs per task on the
// NVLink-pairs nodes gets, for every task, two GPUs joined by NVLink.
func TestGangGetsNVLinkPairs(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ns := newNamespace(t, ctx)
	job := gpuJob(ns, "pairs", 4, 2, 4096, 25, map[string]string{api.GPUTypeIncludeKey: "A100-PCIE-40GB"})
	if _, err := shared.vc.BatchV1alpha1().Jobs(ns).Create(ctx, job, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, p := range waitPodsRunning(t, ctx, ns, 4) {
		a := podAssignment(t, p)
		node, err := shared.kube.CoreV1().Nodes().Get(ctx, p.Spec.NodeName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		inv, err := api.DecodeInventory(node.Annotations[api.InventoryKey])
		if err != nil {
			t.Fatal(err)
		}
		pos := map[string]int{}
		for i, g := range inv.GPUs {
			pos[g.UUID] = i
		}
		d := a.Containers[0].Devices
		if len(d) != 2 {
			t.Fatalf("%s: %d GPUs", p.Name, len(d))
		}
		if !strings.Contains(inv.GPUs[pos[d[0].UUID]].Model, "A100-PCIE-40GB") {
			t.Errorf("%s: on %s, outside the type filter", p.Name, inv.GPUs[pos[d[0].UUID]].Model)
		}
		if l := inv.Link(pos[d[0].UUID], pos[d[1].UUID]); l.NVLinks == 0 {
			t.Errorf("%s on %s got %s and %s, which share no NVLink", p.Name, p.Spec.NodeName, d[0].UUID, d[1].UUID)
		}
	}
}

// TestUnfittableGangLeavesNothing: a gang that cannot fit anywhere stays
// Pending with a readable reason, and none of its pods carries an assignment.
func TestUnfittableGangLeavesNothing(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ns := newNamespace(t, ctx)
	// 3 tasks × 8 exclusive L4s: the cluster has two 4-GPU L4 nodes.
	job := gpuJob(ns, "toobig", 3, 8, 0, 100, map[string]string{api.GPUTypeIncludeKey: "L4"})
	if _, err := shared.vc.BatchV1alpha1().Jobs(ns).Create(ctx, job, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "an unschedulable reason from vgpu", func() error {
		pods, err := shared.kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		if len(pods.Items) != 3 {
			return fmt.Errorf("%d pods", len(pods.Items))
		}
		for _, p := range pods.Items {
			for _, c := range p.Status.Conditions {
				if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && strings.Contains(c.Message, "needs 8 GPUs matching the type/UUID filters") {
					return nil
				}
			}
		}
		return fmt.Errorf("no pod has a PodScheduled=False condition naming the GPU shortfall yet")
	})
	waitSchedulerSessions(t, ctx, 3)
	pods, err := shared.kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if p.Spec.NodeName != "" {
			t.Errorf("%s bound to %s", p.Name, p.Spec.NodeName)
		}
		if _, ok := p.Annotations[api.AssignmentKey]; ok {
			t.Errorf("%s carries an assignment though its gang never fit", p.Name)
		}
	}
}
