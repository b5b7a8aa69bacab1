//go:build e2e

package tests

import (
	"context"
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"

	"github.com/volcano-vgpu/volcano-vgpu/api"
	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/replica"
	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/reschedule"
	"github.com/volcano-vgpu/volcano-vgpu/e2e/cluster"
	"github.com/volcano-vgpu/volcano-vgpu/e2e/kubeletemu"
)

// Invariant checks of the scenario tests: what the pods' assignments book
// per GPU against the node inventories, what each device plugin serves (its
// metrics) and what the kubelet emulator recorded.

// gpuMetrics is what a device plugin's /metrics says about one GPU.
type gpuMetrics struct {
	MemoryAllocatedBytes float64
	CoresAllocated       float64 // 1 = the whole GPU
	Shares               float64
}

// pluginMetrics scrapes a node's device plugin: GPU UUID → what it has served.
func pluginMetrics(ctx context.Context, node string) (map[string]gpuMetrics, error) {
	idx := slices.Index(nodeNames(), node) // the plugins' metrics ports follow the node order
	if idx < 0 {
		return nil, fmt.Errorf("no simulated node %q", node)
	}
	url := fmt.Sprintf("http://127.0.0.1:%d/metrics", shared.cl.Config.Ports.DevicePluginMetricsOffset+idx)
	samples, err := cluster.Samples(ctx, url)
	if err != nil {
		return nil, fmt.Errorf("device plugin of %s: %w", node, err)
	}
	out := map[string]gpuMetrics{}
	for _, s := range samples {
		uuid := s.Label("gpu_uuid")
		g := out[uuid]
		switch s.Name {
		case "volcano_vgpu_gpu_memory_allocated_bytes":
			g.MemoryAllocatedBytes = s.Value
		case "volcano_vgpu_gpu_cores_allocated_ratio":
			g.CoresAllocated = s.Value
		case "volcano_vgpu_gpu_shares":
			g.Shares = s.Value
		default:
			continue
		}
		out[uuid] = g
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("device plugin of %s: no GPU metrics at %s", node, url)
	}
	return out, nil
}

// waitServedOnly waits until a node's device plugin serves exactly the
// containers of pods (one share per assigned GPU), nothing else.
func waitServedOnly(t *testing.T, ctx context.Context, node string, pods []corev1.Pod) {
	t.Helper()
	want := map[string]int{}
	for _, p := range pods {
		for _, u := range gpusOf(t, p) {
			want[u]++
		}
	}
	waitFor(t, ctx, "device plugin of "+node+" serving only the live pods", func() error {
		m, err := pluginMetrics(ctx, node)
		if err != nil {
			return err
		}
		for u, g := range m {
			if int(g.Shares) != want[u] {
				return fmt.Errorf("%s: %v containers served, want %d", u, g.Shares, want[u])
			}
		}
		return nil
	})
}

// inventories returns every simulated node's published inventory.
func inventories(t *testing.T, ctx context.Context) map[string]api.Inventory {
	t.Helper()
	out := map[string]api.Inventory{}
	for _, name := range nodeNames() {
		node, err := shared.kube.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		inv, err := api.DecodeInventory(node.Annotations[api.InventoryKey])
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		out[name] = inv
	}
	return out
}

// gpuBooking is what the live pods' assignments book on one GPU.
type gpuBooking struct {
	Node      string
	MemoryMiB int64
	Cores     int
	Tenants   []string // namespace/pod/container
	Exclusive bool     // some tenant holds 100 cores
}

// bookings sums the assignments of every live pod in the cluster per GPU
// UUID and returns the pods with assignments.
func bookings(t *testing.T, ctx context.Context) (map[string]*gpuBooking, []corev1.Pod) {
	t.Helper()
	list, err := shared.kube.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*gpuBooking{}
	var pods []corev1.Pod
	for _, p := range list.Items {
		if podDone(p) || p.Spec.NodeName == "" {
			continue
		}
		v, ok := p.Annotations[api.AssignmentKey]
		if !ok {
			continue
		}
		a, err := api.DecodeAssignment(v)
		if err != nil {
			continue // deliberately malformed (scenario of its own); the scheduler ignores it too
		}
		pods = append(pods, p)
		for _, c := range a.Containers {
			for _, d := range c.Devices {
				b := out[d.UUID]
				if b == nil {
					b = &gpuBooking{Node: a.Node}
					out[d.UUID] = b
				}
				b.MemoryMiB += d.MemoryMiB
				b.Cores += d.Cores
				b.Tenants = append(b.Tenants, p.Namespace+"/"+p.Name+"/"+c.Name)
				b.Exclusive = b.Exclusive || d.Cores == 100
			}
		}
	}
	return out, pods
}

// checkNoDoubleBooking checks every GPU of the cluster against its inventory:
// booked memory within capacity, cores at most 100, an exclusive tenant alone,
// tenants at most maxShares, and each GPU booked only on its own node.
func checkNoDoubleBooking(t *testing.T, ctx context.Context) map[string]*gpuBooking {
	t.Helper()
	invs := inventories(t, ctx)
	type gpuAt struct {
		node string
		gpu  api.GPU
	}
	gpus := map[string]gpuAt{}
	for node, inv := range invs {
		for _, g := range inv.GPUs {
			gpus[g.UUID] = gpuAt{node, g}
		}
	}
	books, _ := bookings(t, ctx)
	for uuid, b := range books {
		g, ok := gpus[uuid]
		switch {
		case !ok:
			t.Errorf("%s is booked by %v but no node publishes it", uuid, b.Tenants)
			continue
		case g.node != b.Node:
			t.Errorf("%s of %s is booked on node %s by %v", uuid, g.node, b.Node, b.Tenants)
		}
		if b.MemoryMiB > g.gpu.MemoryMiB {
			t.Errorf("%s (%s): %d MiB booked of %d by %v", uuid, g.node, b.MemoryMiB, g.gpu.MemoryMiB, b.Tenants)
		}
		if b.Cores > 100 {
			t.Errorf("%s (%s): %d%% cores booked by %v", uuid, g.node, b.Cores, b.Tenants)
		}
		if b.Exclusive && len(b.Tenants) > 1 {
			t.Errorf("%s (%s): exclusive tenant shares the GPU: %v", uuid, g.node, b.Tenants)
		}
		if len(b.Tenants) > g.gpu.MaxShares {
			t.Errorf("%s (%s): %d tenants, maxShares %d", uuid, g.node, len(b.Tenants), g.gpu.MaxShares)
		}
	}
	return books
}

// checkPluginAgrees compares each node's device plugin metrics with the
// bookings of the pods it has served (pods whose assignment is allocated).
func checkPluginAgrees(t *testing.T, ctx context.Context, nodes ...string) {
	t.Helper()
	_, pods := bookings(t, ctx)
	type sum struct {
		mem    int64
		cores  int
		shares int
	}
	want := map[string]*sum{}
	for _, p := range pods {
		a := podAssignment(t, p)
		for _, c := range a.Containers {
			for _, d := range c.Devices {
				s := want[d.UUID]
				if s == nil {
					s = &sum{}
					want[d.UUID] = s
				}
				s.mem += d.MemoryMiB
				s.cores += d.Cores
				s.shares++
			}
		}
	}
	for _, node := range nodes {
		m, err := pluginMetrics(ctx, node)
		if err != nil {
			t.Fatal(err)
		}
		for uuid, g := range m {
			w := want[uuid]
			if w == nil {
				w = &sum{}
			}
			if int64(g.MemoryAllocatedBytes) != w.mem<<20 || int(g.Shares) != w.shares || int(g.CoresAllocated*100+0.5) != w.cores {
				t.Errorf("%s %s: device plugin serves %v MiB, %v%% cores, %v containers; assignments book %d MiB, %d%%, %d",
					node, uuid, g.MemoryAllocatedBytes/(1<<20), g.CoresAllocated*100, g.Shares, w.mem, w.cores, w.shares)
			}
		}
	}
}

// checkServed checks a pod's kubelet record against its assignment: every
// container admitted with device IDs on exactly its assigned GPUs and the
// answer naming them (CDI devices, or NVIDIA_VISIBLE_DEVICES in env mode). It returns the device IDs by container.
func checkServed(t *testing.T, p corev1.Pod, rec kubeletemu.Record) map[string][]string {
	t.Helper()
	a := podAssignment(t, p)
	ids := map[string][]string{}
	for _, cr := range rec.Containers {
		ca, ok := a.Container(cr.Name, cr.Init)
		if !ok {
			t.Errorf("%s: kubelet served container %s, which has no assignment", p.Name, cr.Name)
			continue
		}
		var want []string
		for _, d := range ca.Devices {
			want = append(want, d.UUID)
		}
		sort.Strings(want)
		var got []string
		for _, id := range cr.DeviceIDs {
			got = append(got, replica.UUID(id))
		}
		sort.Strings(got)
		if !slices.Equal(got, want) {
			t.Errorf("%s/%s: kubelet got device IDs %v (GPUs %v), assigned %v", p.Name, cr.Name, cr.DeviceIDs, got, want)
		}
		if cr.Response == nil {
			t.Errorf("%s/%s: no Allocate response recorded", p.Name, cr.Name)
			continue
		}
		// A MIG instance is named by its MIG device's UUID: the one the
		// assignment took over, or the one the plugin created (which
		// TestScenarioMIG checks against the inventory).
		var wantWhole, wantMIG []string
		migs := 0
		for _, d := range ca.Devices {
			switch {
			case d.MIG == nil:
				wantWhole = append(wantWhole, d.UUID)
			case d.MIG.UUID != "":
				wantMIG = append(wantMIG, d.MIG.UUID)
				migs++
			default:
				migs++
			}
		}
		sort.Strings(wantWhole)
		var visWhole, visMIG []string
		for _, v := range cr.Response.GPUs() {
			if strings.HasPrefix(v, "MIG-") {
				visMIG = append(visMIG, v)
			} else {
				visWhole = append(visWhole, v)
			}
		}
		sort.Strings(visWhole)
		taken := true
		for _, u := range wantMIG {
			taken = taken && slices.Contains(visMIG, u)
		}
		if !slices.Equal(visWhole, wantWhole) || len(visMIG) != migs || !taken {
			t.Errorf("%s/%s: the answer gives GPUs %v and MIG devices %v (CDI devices %v, %s=%q), assigned %v with %d MIG instances (taken over: %v)", p.Name, cr.Name, visWhole, visMIG,
				cr.Response.CDIDevices, api.EnvVisibleDevices, cr.Response.Envs[api.EnvVisibleDevices], wantWhole, migs, wantMIG)
		}
		ids[cr.Name] = cr.DeviceIDs
	}
	return ids
}

// limiterConfig reads the limiter config a container's Allocate answer mounts.
func limiterConfig(t *testing.T, resp *kubeletemu.AllocateResponse) *api.LimiterConfig {
	t.Helper()
	m, ok := resp.Mount(api.LimiterConfigPath)
	if !ok {
		t.Fatalf("no mount at %s in %+v", api.LimiterConfigPath, resp.Mounts)
	}
	if !m.ReadOnly {
		t.Errorf("limiter config %s mounted read-write", m.HostPath)
	}
	data, err := os.ReadFile(m.HostPath)
	if err != nil {
		t.Fatal(err)
	}
	lc, err := api.DecodeLimiterConfig(data)
	if err != nil {
		t.Fatalf("%s: %v", m.HostPath, err)
	}
	return lc
}

// gpusOf returns the UUIDs a pod's assignment names, in order.
func gpusOf(t *testing.T, p corev1.Pod) []string {
	t.Helper()
	var out []string
	for _, c := range podAssignment(t, p).Containers {
		for _, d := range c.Devices {
			out = append(out, d.UUID)
		}
	}
	return out
}

// rescheduleEvent waits for the device plugin's Event that handed pod back
// to the scheduler, and returns it.
func rescheduleEvent(t *testing.T, ctx context.Context, ns, pod string) corev1.Event {
	t.Helper()
	var ev corev1.Event
	waitFor(t, ctx, "the device plugin's event on "+pod, func() error {
		evs, err := shared.kube.CoreV1().Events(ns).List(ctx, metav1.ListOptions{
			FieldSelector: fields.OneTermEqualSelector("reason", reschedule.EventReason).String(),
		})
		if err != nil {
			return err
		}
		for _, e := range evs.Items {
			if e.InvolvedObject.Name == pod {
				ev = e
				return nil
			}
		}
		return fmt.Errorf("none among %d", len(evs.Items))
	})
	return ev
}
