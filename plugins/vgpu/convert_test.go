package vgpu

import (
	"testing"

	"github.com/volcano-vgpu/volcano-vgpu/api"
	"github.com/volcano-vgpu/volcano-vgpu/plugins/placement"
)

func TestPCIeLevel(t *testing.T) {
	tests := []struct {
		name string
		in   api.PCIeLevel
		want placement.PCIeLevel
	}{
		{name: "internal", in: api.PCIeInternal, want: placement.PCIeInternal},
		{name: "single", in: api.PCIeSingle, want: placement.PCIeSingle},
		{name: "multiple", in: api.PCIeMultiple, want: placement.PCIeMultiple},
		{name: "hostbridge", in: api.PCIeHostBridge, want: placement.PCIeHostBridge},
		{name: "node", in: api.PCIeNode, want: placement.PCIeNode},
		{name: "system", in: api.PCIeSystem, want: placement.PCIeSystem},
		{name: "out of range", in: api.PCIeSystem + 1, want: placement.PCIeUnknown},
		{name: "negative", in: -1, want: placement.PCIeUnknown},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := pcieLevel(tc.in)
			if got != tc.want {
				t.Errorf("pcieLevel(%v) = %v, want %v", tc.in, got, tc.want)
			}
			if tc.in.Valid() && got.String() != tc.in.String() {
				t.Errorf("names differ: api %q, core %q", tc.in.String(), got.String())
			}
		})
	}
}

func TestNodeFromInventoryLinks(t *testing.T) {
	node := newGPUNode("n1", "A100-80GB", 4, 81920).nvlinkPairs().obj(t)
	n, _, err := nodeFromInventory(node)
	if err != nil {
		t.Fatal(err)
	}
	// Fixture: GPUs 0,1 on NUMA 0 (PCIe "node"), 2,3 on NUMA 1; pairs (0,1)(2,3) NVLinked.
	if l := n.Links.At(0, 1); l.NVLinks != 4 || l.PCIe != placement.PCIeNode {
		t.Errorf("link 0-1 = %+v, want 4 NVLinks, PCIe node", l)
	}
	if l := n.Links.At(1, 2); l.NVLinks != 0 || l.PCIe != placement.PCIeSystem {
		t.Errorf("link 1-2 = %+v, want no NVLink, PCIe system", l)
	}
}
