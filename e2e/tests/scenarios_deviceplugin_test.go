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
	"k8s.io/apimachinery/pkg/fields"

	"github.com/volcano-vgpu/volcano-vgpu/api"
	"github.com/volcano-vgpu/volcano-vgpu/e2e/cluster"
	"github.com/volcano-vgpu/volcano-vgpu/e2e/kubeletemu"
)

// TestScenarioHundredPodsOneNode: 100 single-GPU pods, each with its own
// memory and core limits, created in parallel for one 8-GPU node. The node
// has 8 × maxShares 10 = 80 vgpu-number replicas: 80 pods run, 10 per GPU,
// each container served exactly its own GPU and limits (kubelet record and
// the limiter config file the plugin wrote); 20 wait with a reason.
func TestScenarioHundredPodsOneNode(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const node = "a100-80g-1"
	waitNodeFree(t, ctx, node)
	ns := newNamespace(t, ctx)

	// Pod i asks 2000+13i MiB and 1+i%10 cores: ten of them on one GPU stay
	// under 81920 MiB and 100 cores, so only the replica count binds.
	limits := map[string][2]int64{}
	var pods []*corev1.Pod
	for i := range 100 {
		name := fmt.Sprintf("p%03d", i)
		mem, cores := int64(2000+13*i), int64(1+i%10)
		limits[name] = [2]int64{mem, cores}
		pods = append(pods, gpuPod(ns, name, node, 1, mem, cores))
	}
	start := time.Now()
	took, err := createPods(ctx, pods, 8, nil)
	if err != nil {
		t.Fatal(err)
	}
	const hold = 2 * time.Second
	running, pending := waitSettled(t, ctx, ns, 100, 80, hold)
	t.Logf("100 pods created in %s; 80 running within %s of the first creation", took.Round(time.Millisecond), (time.Since(start) - hold).Round(100*time.Millisecond))

	perGPU := map[string]int{}
	owner := map[string]string{} // device ID → pod
	configs := map[string]string{}
	for _, p := range running {
		rec := waitAllocated(t, ctx, p)
		ids := checkServed(t, p, rec)
		for _, id := range ids["main"] {
			if other, dup := owner[id]; dup {
				t.Errorf("device ID %s given to %s and %s", id, other, p.Name)
			}
			owner[id] = p.Name
		}
		a := podAssignment(t, p)
		d := a.Containers[0].Devices[0]
		perGPU[d.UUID]++
		want := limits[p.Name]
		if d.MemoryMiB != want[0] || int64(d.Cores) != want[1] {
			t.Errorf("%s: assigned %d MiB %d%%, asked %d MiB %d%%", p.Name, d.MemoryMiB, d.Cores, want[0], want[1])
		}
		resp := rec.Containers[0].Response
		m, _ := resp.Mount(api.LimiterConfigPath)
		if other, dup := configs[m.HostPath]; dup {
			t.Errorf("%s and %s share the limiter config %s", p.Name, other, m.HostPath)
		}
		configs[m.HostPath] = p.Name
		lc := limiterConfig(t, resp)
		switch {
		case lc.PodUID != string(p.UID) || lc.PodName != p.Name || lc.PodNamespace != ns || lc.ContainerName != "main":
			t.Errorf("%s: limiter config is for %s/%s (%s) container %s", p.Name, lc.PodNamespace, lc.PodName, lc.PodUID, lc.ContainerName)
		case len(lc.Devices) != 1 || lc.Devices[0].UUID != d.UUID || lc.Devices[0].MemoryLimitBytes != uint64(want[0])<<20 || int64(lc.Devices[0].CorePercent) != want[1]:
			t.Errorf("%s: limiter devices %+v, want %s with %d MiB and %d%%", p.Name, lc.Devices, d.UUID, want[0], want[1])
		}
	}
	if len(perGPU) != 8 {
		t.Errorf("pods on %d GPUs, want 8", len(perGPU))
	}
	for u, n := range perGPU {
		if n != 10 {
			t.Errorf("%s: %d pods, want maxShares 10", u, n)
		}
	}
	msg := unschedulableMessage(pending[0])
	if msg == "" {
		p, err := shared.kube.CoreV1().Pods(ns).Get(ctx, pending[0].Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		msg = unschedulableMessage(*p)
	}
	t.Logf("a pod beyond the node's 80 replicas: %s", msg)
	if !strings.Contains(msg, "vgpu-number") && !strings.Contains(msg, "tenants") {
		t.Errorf("waiting pod's reason %q names neither vgpu-number nor the tenant limit", msg)
	}
	checkNoDoubleBooking(t, ctx)
	checkPluginAgrees(t, ctx, node)
}

// TestScenarioMalformedAssignment: a pod bound straight to a node (no
// scheduler) with a malformed assignment annotation is refused by Allocate
// with a message naming the pod and the annotation, kubelet posts an
// UnexpectedAdmissionError Event, and the device plugin keeps running and
// serving the next pod.
func TestScenarioMalformedAssignment(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const node = "a100-40g-1"
	ns := newNamespace(t, ctx)
	pidBefore, _ := componentPid(cluster.DevicePluginName(node))

	for _, c := range []struct{ name, value, want string }{
		{"truncated", `{"version":"v1","podUID":"x","containers":[{"name":"main"`, "expected a valid JSON object"},
		{"version", `{"version":"v9","podUID":"x","node":"` + node + `","time":"2025-01-01T00:00:00Z","phase":"assigned","containers":[{"name":"main","devices":[{"uuid":"GPU-00000000-0000-0000-0000-000000000000","memoryMiB":1024,"cores":10}]}]}`, `"v1"`},
	} {
		bad := gpuPod(ns, c.name, "", 1, 1024, 10)
		bad.Spec.SchedulerName, bad.Spec.NodeName = "", node
		bad.Annotations = map[string]string{api.AssignmentKey: c.value}
		bad, err := shared.kube.CoreV1().Pods(ns).Create(ctx, bad, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var rec kubeletemu.Record
		waitFor(t, ctx, "the kubelet emulator's record of pod "+c.name, func() error {
			rec, err = kubeletemu.ReadRecord(shared.cl.Config.SocketDir, node, string(bad.UID))
			return err
		})
		t.Logf("%s: Allocate refused: %s", c.name, rec.Error)
		if rec.Admitted {
			t.Fatalf("%s: a pod with a malformed assignment was admitted: %+v", c.name, rec)
		}
		// The error names the pod, the annotation and what was expected.
		if i := strings.Index(rec.Error, ns+"/"+c.name+": "+api.AssignmentKey); i < 0 || !strings.Contains(rec.Error[i:], c.want) {
			t.Errorf("%s: Allocate error does not say \"%s/%s: %s: …%s…\": %s", c.name, ns, c.name, api.AssignmentKey, c.want, rec.Error)
		}
		waitFor(t, ctx, "an UnexpectedAdmissionError Event on "+c.name, func() error {
			evs, err := shared.kube.CoreV1().Events(ns).List(ctx, metav1.ListOptions{
				FieldSelector: fields.OneTermEqualSelector("involvedObject.name", c.name).String(),
			})
			if err != nil {
				return err
			}
			for _, e := range evs.Items {
				if e.Reason == "UnexpectedAdmissionError" && e.InvolvedObject.UID == bad.UID && strings.Contains(e.Message, api.AssignmentKey) {
					return nil
				}
			}
			return fmt.Errorf("%d events, none UnexpectedAdmissionError naming the annotation", len(evs.Items))
		})
	}

	// The plugin did not crash and still serves a well-formed pod.
	if pid, alive := componentPid(cluster.DevicePluginName(node)); pid != pidBefore || !alive {
		t.Fatalf("device plugin of %s: pid %d before, %d now (alive: %t)", node, pidBefore, pid, alive)
	}
	runPod(t, ctx, gpuPod(ns, "good", node, 1, 1024, 10))
}
