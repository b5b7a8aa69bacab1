package fromapi

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/volcano-vgpu/volcano-vgpu/api"
	"github.com/volcano-vgpu/volcano-vgpu/plugins/placement"
)

func TestAssignmentRoundTrip(t *testing.T) {
	a := api.Assignment{PodUID: "uid-1", Node: "n1", Phase: api.PhaseAssigned, Containers: []api.ContainerAssignment{
		{Name: "init", Init: true, Restartable: true, Devices: []api.DeviceShare{{UUID: "GPU-1", MemoryMiB: 1024, Cores: 10}}},
		{Name: "main", Devices: []api.DeviceShare{{UUID: "GPU-1", MemoryMiB: 2048, Cores: 20}, {UUID: "GPU-2", MemoryMiB: 2048, Cores: 20}}},
	}}
	if d := cmp.Diff(a, Assignment(Placement(a), "uid-1")); d != "" {
		t.Errorf("assignment → placement → assignment (-in +out):\n%s", d)
	}
}

func TestNode(t *testing.T) {
	beat := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	inv := api.Inventory{Heartbeat: beat, GPUs: []api.GPU{
		{Index: 0, UUID: "GPU-a0000000-0000-4000-8000-000000000000", Model: "A100", MemoryMiB: 40960, Healthy: true, MaxShares: 4},
		{Index: 1, UUID: "GPU-a0000000-0000-4000-8000-000000000001", Model: "A100", MemoryMiB: 40960, Healthy: false, MaxShares: 4},
	}, NVLinks: [][]int{{0, 12}, {12, 0}}, PCIe: [][]api.PCIeLevel{{0, api.PCIeNode}, {api.PCIeNode, 0}}}
	v, err := api.EncodeInventory(inv)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name      string
		ann       map[string]string
		wantGPUs  int
		wantErr   bool
		wantNV    int
		wantBeat  time.Time
		wantNoInv bool
	}{
		{name: "published inventory", ann: map[string]string{api.InventoryKey: v}, wantGPUs: 2, wantNV: 12, wantBeat: beat},
		{name: "no inventory: no GPUs for us", ann: nil, wantNoInv: true},
		{name: "malformed inventory is an error", ann: map[string]string{api.InventoryKey: "{"}, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n, got, err := Node(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Annotations: tc.ann}})
			switch {
			case tc.wantErr:
				if err == nil {
					t.Fatal("no error")
				}
				return
			case err != nil:
				t.Fatal(err)
			case tc.wantNoInv:
				if n != nil {
					t.Fatalf("node %+v, want nil", n)
				}
				return
			}
			if len(n.GPUs) != tc.wantGPUs || !got.Equal(tc.wantBeat) || n.GPUs[1].Healthy || n.GPUs[0].Mode != api.ModeTimeSliced {
				t.Errorf("node %+v, heartbeat %v", n, got)
			}
			if l := n.Links.At(0, 1); l.NVLinks != tc.wantNV || l.PCIe != placement.PCIeNode {
				t.Errorf("link 0-1 %+v, want %d NVLinks over PCIe node", l, tc.wantNV)
			}
		})
	}
}

// A MIG instance travels through the placement core and back unchanged.
func TestMIGAssignmentRoundTrip(t *testing.T) {
	a := api.Assignment{PodUID: "uid-1", Node: "n1", Phase: api.PhaseAssigned, Containers: []api.ContainerAssignment{
		{Name: "main", Devices: []api.DeviceShare{{UUID: "GPU-1", MemoryMiB: 19968, Cores: 42,
			MIG: &api.MIGDevice{Profile: "3g.20gb", Placement: api.MIGPlacement{Start: 4, Size: 4}, UUID: "MIG-a"}}}},
		{Name: "side", Devices: []api.DeviceShare{{UUID: "GPU-2", MemoryMiB: 1024, Cores: 10}}},
	}}
	p := Placement(a)
	if got := p.Containers[0].Devices[0].MIG; got.Profile != "3g.20gb" || got.Placement.Start != 4 {
		t.Errorf("placement device MIG = %+v", got)
	}
	if d := cmp.Diff(a, Assignment(p, "uid-1")); d != "" {
		t.Errorf("assignment → placement → assignment (-in +out):\n%s", d)
	}
}

func TestMIGFromInventory(t *testing.T) {
	m := &api.MIG{Geometry: api.MIGFixed, MemorySlices: 8,
		Profiles:  []api.MIGProfile{{Name: "7g.40gb", Slices: 7, MemoryMiB: 40192, Instances: 1, Placements: []api.MIGPlacement{{Start: 0, Size: 8}}}},
		Instances: []api.MIGInstance{{Profile: "7g.40gb", Placement: api.MIGPlacement{Start: 0, Size: 8}, UUID: "MIG-a"}}}
	n := FromInventory("n1", api.Inventory{GPUs: []api.GPU{
		{Index: 0, UUID: "GPU-0", Model: "A100", MemoryMiB: 40960, Healthy: true, MaxShares: 4, Mode: api.ModeMIG, MIG: m},
		{Index: 1, UUID: "GPU-1", Model: "A100", MemoryMiB: 40960, Healthy: true, MaxShares: 4},
	}, NVLinks: [][]int{{0, 0}, {0, 0}}, PCIe: [][]api.PCIeLevel{{0, 0}, {0, 0}}})
	want := &placement.MIG{Fixed: true, MemorySlices: 8, Profiles: m.Profiles, Instances: m.Instances}
	if d := cmp.Diff(want, n.GPUs[0].MIG); d != "" || n.GPUs[0].Mode != api.ModeMIG || n.GPUs[1].MIG != nil {
		t.Errorf("MIG GPU (-want +got):\n%s; modes %s, %s; GPU 1 MIG %+v", d, n.GPUs[0].Mode, n.GPUs[1].Mode, n.GPUs[1].MIG)
	}
}
