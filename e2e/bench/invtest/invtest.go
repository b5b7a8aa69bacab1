// Package invtest builds node inventories (api.Inventory) for the bench's
// tests: invtest.Node("n1", 4, 40960).NVLink(0, 1, 4).Split(2).Obj().
// GPU i of node n has UUID "<n>-GPU-<i>"; every pair starts on one NUMA node
// (PCIe "node") with no NVLinks.
package invtest

import (
	"fmt"

	"github.com/volcano-vgpu/volcano-vgpu/api"
)

// Builder builds one inventory.
type Builder struct{ inv api.Inventory }

// Node starts an inventory of gpus healthy A100s of memMiB each.
func Node(name string, gpus int, memMiB int64) *Builder {
	b := &Builder{inv: api.Inventory{Version: api.Version}}
	for i := range gpus {
		b.inv.GPUs = append(b.inv.GPUs, api.GPU{Index: i, UUID: UUID(name, i), Model: "A100", MemoryMiB: memMiB, Healthy: true, MaxShares: 10})
	}
	b.inv.NVLinks = make([][]int, gpus)
	b.inv.PCIe = make([][]api.PCIeLevel, gpus)
	for i := range gpus {
		b.inv.NVLinks[i] = make([]int, gpus)
		b.inv.PCIe[i] = make([]api.PCIeLevel, gpus)
	}
	return b.FlatPCIe(api.PCIeNode)
}

// UUID is the UUID Node gives GPU i of node.
func UUID(node string, i int) string { return fmt.Sprintf("%s-GPU-%d", node, i) }

// FlatPCIe puts every pair at one PCIe level.
func (b *Builder) FlatPCIe(level api.PCIeLevel) *Builder {
	return b.eachPair(func(i, j int) { b.inv.PCIe[i][j] = level })
}

// NVLink links GPUs i and j with n NVLinks.
func (b *Builder) NVLink(i, j, n int) *Builder {
	b.inv.NVLinks[i][j], b.inv.NVLinks[j][i] = n, n
	return b
}

// PCIe sets the PCIe level between GPUs i and j.
func (b *Builder) PCIe(i, j int, level api.PCIeLevel) *Builder {
	b.inv.PCIe[i][j], b.inv.PCIe[j][i] = level, level
	return b
}

// NVSwitch links every pair with n NVLinks.
func (b *Builder) NVSwitch(n int) *Builder {
	return b.eachPair(func(i, j int) { b.inv.NVLinks[i][j] = n })
}

// Split puts GPUs from first on on another NUMA node (their NUMA field,
// and PCIe "system" to the GPUs before first).
func (b *Builder) Split(first int) *Builder {
	for i := first; i < len(b.inv.GPUs); i++ {
		b.inv.GPUs[i].NUMA = 1
	}
	return b.eachPair(func(i, j int) {
		if (i < first) != (j < first) {
			b.inv.PCIe[i][j] = api.PCIeSystem
		}
	})
}

func (b *Builder) eachPair(fn func(i, j int)) *Builder {
	for i := range b.inv.GPUs {
		for j := range b.inv.GPUs {
			if i != j {
				fn(i, j)
			}
		}
	}
	return b
}

// Obj returns the inventory.
func (b *Builder) Obj() api.Inventory { return b.inv }
