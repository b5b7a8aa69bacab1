package plugin

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/volcano-vgpu/volcano-vgpu/api"
	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/config"
)

func TestInventoryPublishesModes(t *testing.T) {
	var uuid1 string
	e := newEnvWith(t, t.TempDir(), func(c *config.Config) {
		uuid1 = simNode(t, testNode).GPUs[1].UUID
		c.Sharing.Nodes = map[string]api.GPUMode{testNode: api.ModeMPS}
		c.Sharing.GPUs = map[string]api.GPUMode{uuid1: api.ModeTimeSliced}
	})
	got := map[string]api.GPUMode{}
	want := map[string]api.GPUMode{}
	for _, g := range e.p.Inventory().GPUs {
		got[g.UUID] = g.Mode
		want[g.UUID] = api.ModeMPS // the node's rule
	}
	want[uuid1] = api.ModeTimeSliced // the GPU's own rule wins
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("published modes (-want +got):\n%s", d)
	}
	inv := e.p.Inventory()
	inv.Heartbeat = t0
	if _, err := api.EncodeInventory(inv); err != nil {
		t.Errorf("the inventory does not encode: %v", err)
	}
}
