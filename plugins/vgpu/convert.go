package vgpu

// The conversions between the contract (api: what the device plugin publishes
// and the scheduler writes) and the placement core's values. They are the
// only place the two vocabularies meet.

import (
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/volcano-vgpu/volcano-vgpu/api"
	"github.com/volcano-vgpu/volcano-vgpu/plugins/placement"
)

// pcieLevel maps a published PCIe level onto the core's, which keeps 0 for
// "unknown": an out-of-range level (DecodeInventory refuses those) is unknown.
func pcieLevel(l api.PCIeLevel) placement.PCIeLevel {
	if !l.Valid() {
		return placement.PCIeUnknown
	}
	return placement.PCIeInternal + placement.PCIeLevel(l-api.PCIeInternal)
}

// nodeFromInventory builds the placement core's node (usage zero) from the
// device plugin's inventory annotation, and returns the inventory's heartbeat.
// A node without one has no GPUs for us (nil); a malformed one is an error and
// the node gets nothing.
func nodeFromInventory(node *corev1.Node) (*placement.Node, time.Time, error) {
	value, ok := node.Annotations[api.InventoryKey]
	if !ok {
		return nil, time.Time{}, nil
	}
	inv, err := api.DecodeInventory(value)
	if err != nil {
		return nil, time.Time{}, err
	}
	n := &placement.Node{Name: node.Name, GPUs: make([]placement.GPU, len(inv.GPUs))}
	for i, g := range inv.GPUs {
		n.GPUs[i] = placement.GPU{
			Index: g.Index, UUID: g.UUID, Model: g.Model, MemoryMiB: g.MemoryMiB,
			Healthy: g.Healthy, NUMA: g.NUMA, MaxShares: g.MaxShares,
			Mode: g.SharingMode(),
		}
	}
	if len(inv.GPUs) <= placement.MaxGPUs {
		n.Links = placement.NewLinks(len(inv.GPUs))
		for i := range inv.GPUs {
			for j := i + 1; j < len(inv.GPUs); j++ {
				l := inv.Link(i, j)
				n.Links.Set(i, j, placement.Link{NVLinks: l.NVLinks, PCIe: pcieLevel(l.PCIe)})
			}
		}
	}
	return n, inv.Heartbeat, nil
}

// toAssignment renders a placement as the pod annotation payload.
func toAssignment(p placement.Placement, podUID string) api.Assignment {
	a := api.Assignment{PodUID: podUID, Node: p.Node, Phase: api.PhaseAssigned}
	for _, c := range p.Containers {
		if len(c.Devices) == 0 {
			continue
		}
		ca := api.ContainerAssignment{Name: c.Name, Init: c.Init, Restartable: c.Restartable}
		for _, d := range c.Devices {
			ca.Devices = append(ca.Devices, api.DeviceShare{UUID: d.UUID, MemoryMiB: d.MemoryMiB, Cores: d.Cores})
		}
		a.Containers = append(a.Containers, ca)
	}
	return a
}

// fromAssignment is the placement an assignment annotation records.
func fromAssignment(a api.Assignment) placement.Placement {
	p := placement.Placement{Node: a.Node}
	for _, c := range a.Containers {
		cp := placement.ContainerPlacement{Name: c.Name, Init: c.Init, Restartable: c.Restartable}
		for _, d := range c.Devices {
			cp.Devices = append(cp.Devices, placement.Device{Pos: -1, UUID: d.UUID, MemoryMiB: d.MemoryMiB, Cores: d.Cores})
		}
		p.Containers = append(p.Containers, cp)
	}
	return p
}
