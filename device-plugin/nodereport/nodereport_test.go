package nodereport

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/volcano-vgpu/volcano-vgpu/api"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func inventory(healthy ...bool) api.Inventory {
	inv := api.Inventory{NVLinks: [][]int{{0, 4}, {4, 0}}, PCIe: [][]api.PCIeLevel{{0, 1}, {1, 0}}}
	for i, h := range healthy {
		inv.GPUs = append(inv.GPUs, api.GPU{Index: i, UUID: []string{"GPU-a", "GPU-b"}[i], Model: "A100", MemoryMiB: 40960, Healthy: h, MaxShares: 10})
	}
	return inv
}

func TestPublish(t *testing.T) {
	client := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}})
	clk := clocktesting.NewFakePassiveClock(t0)
	r := &Reporter{Client: client, Node: "n1", Names: api.DefaultResourceNames(), Clock: clk, HeartbeatPeriod: time.Minute}
	ctx := context.Background()
	steps := []struct {
		name        string
		at          time.Duration
		inv         api.Inventory
		wantPatched bool
		wantMemory  int64 // 2 healthy × 40960 = 81920
		wantCores   int64
	}{
		{"first report", 0, inventory(true, true), true, 81920, 200},
		{"nothing changed", 30 * time.Second, inventory(true, true), false, 81920, 200},
		{"heartbeat due", time.Minute, inventory(true, true), true, 81920, 200},
		{"GPU b unhealthy", 70 * time.Second, inventory(true, false), true, 40960, 100},
	}
	for _, s := range steps {
		clk.SetTime(t0.Add(s.at))
		client.ClearActions()
		patched, err := r.Publish(ctx, s.inv)
		if err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		if patched != s.wantPatched {
			t.Errorf("%s: patched = %v, want %v", s.name, patched, s.wantPatched)
		}
		if !patched {
			if n := len(client.Actions()); n != 0 {
				t.Errorf("%s: %d API calls, want none", s.name, n)
			}
			continue
		}
		node, err := client.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		inv, err := api.DecodeInventory(node.Annotations[api.InventoryKey])
		if err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		if !inv.Heartbeat.Equal(t0.Add(s.at).Truncate(time.Second)) {
			t.Errorf("%s: heartbeat = %v", s.name, inv.Heartbeat)
		}
		mem := node.Status.Allocatable[corev1.ResourceName(api.DefaultResourceMemory)]
		cores := node.Status.Capacity[corev1.ResourceName(api.DefaultResourceCores)]
		if mem.Value() != s.wantMemory || cores.Value() != s.wantCores {
			t.Errorf("%s: memory %s, cores %s; want %d and %d", s.name, mem.String(), cores.String(), s.wantMemory, s.wantCores)
		}
	}
}
