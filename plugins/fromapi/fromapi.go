// Package fromapi converts between the published contract (package api: the
// device plugin's inventory, the scheduler's assignments, the pod's asks) and
// the placement core's values. It is the only place the two vocabularies
// meet: the Volcano plugin and the kubectl plugin both go through it, so a
// node, a booking and an ask read the same in both.
package fromapi

import (
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/volcano-vgpu/volcano-vgpu/api"
	"github.com/volcano-vgpu/volcano-vgpu/plugins/placement"
	"github.com/volcano-vgpu/volcano-vgpu/podrequest"
)

// PCIeLevel maps a published PCIe level onto the core's, which keeps 0 for
// "unknown": an out-of-range level (DecodeInventory refuses those) is unknown.
func PCIeLevel(l api.PCIeLevel) placement.PCIeLevel {
	if !l.Valid() {
		return placement.PCIeUnknown
	}
	return placement.PCIeInternal + placement.PCIeLevel(l-api.PCIeInternal)
}

// Node builds the placement core's node (usage zero) from the device
// plugin's inventory annotation, and returns the inventory's heartbeat. A
// node without one has no GPUs for us (nil); a malformed one is an error and
// the node gets nothing.
func Node(node *corev1.Node) (*placement.Node, time.Time, error) {
	value, ok := node.Annotations[api.InventoryKey]
	if !ok {
		return nil, time.Time{}, nil
	}
	inv, err := api.DecodeInventory(value)
	if err != nil {
		return nil, time.Time{}, err
	}
	return FromInventory(node.Name, inv), inv.Heartbeat, nil
}

// FromInventory is the placement core's node (usage zero) of a decoded
// inventory.
func FromInventory(name string, inv api.Inventory) *placement.Node {
	n := &placement.Node{Name: name, GPUs: make([]placement.GPU, len(inv.GPUs))}
	for i, g := range inv.GPUs {
		n.GPUs[i] = placement.GPU{
			Index: g.Index, UUID: g.UUID, Model: g.Model, MemoryMiB: g.MemoryMiB,
			Healthy: g.Healthy, NUMA: g.NUMA, MaxShares: g.MaxShares,
			Mode: g.SharingMode(), // absent: time-sliced
			MIG:  MIG(g.MIG),
		}
	}
	if len(inv.GPUs) <= placement.MaxGPUs {
		n.Links = placement.NewLinks(len(inv.GPUs))
		for i := range inv.GPUs {
			for j := i + 1; j < len(inv.GPUs); j++ {
				l := inv.Link(i, j)
				n.Links.Set(i, j, placement.Link{NVLinks: l.NVLinks, PCIe: PCIeLevel(l.PCIe)})
			}
		}
	}
	return n
}

// MIG is the placement core's view of a GPU's published MIG state; nil for
// none. The core only reads it: the inventory's slices are shared.
func MIG(m *api.MIG) *placement.MIG {
	if m == nil {
		return nil
	}
	return &placement.MIG{Fixed: m.Geometry == api.MIGFixed, MemorySlices: m.MemorySlices, Profiles: m.Profiles, Instances: m.Instances}
}

// migDevice is a container's MIG instance for the assignment; nil for a
// share of a GPU.
func migDevice(d placement.Device) *api.MIGDevice {
	if d.MIG.Profile == "" {
		return nil
	}
	m := d.MIG
	return &m
}

// Assignment renders a placement as the pod annotation payload.
func Assignment(p placement.Placement, podUID string) api.Assignment {
	a := api.Assignment{PodUID: podUID, Node: p.Node, Phase: api.PhaseAssigned}
	for _, c := range p.Containers {
		if len(c.Devices) == 0 {
			continue
		}
		ca := api.ContainerAssignment{Name: c.Name, Init: c.Init, Restartable: c.Restartable}
		for _, d := range c.Devices {
			ca.Devices = append(ca.Devices, api.DeviceShare{UUID: d.UUID, MemoryMiB: d.MemoryMiB, Cores: d.Cores, MIG: migDevice(d)})
		}
		a.Containers = append(a.Containers, ca)
	}
	return a
}

// Placement is the placement an assignment annotation records.
func Placement(a api.Assignment) placement.Placement {
	p := placement.Placement{Node: a.Node}
	for _, c := range a.Containers {
		cp := placement.ContainerPlacement{Name: c.Name, Init: c.Init, Restartable: c.Restartable}
		for _, d := range c.Devices {
			pd := placement.Device{Pos: -1, UUID: d.UUID, MemoryMiB: d.MemoryMiB, Cores: d.Cores}
			if d.MIG != nil {
				pd.MIG = *d.MIG
			}
			cp.Devices = append(cp.Devices, pd)
		}
		p.Containers = append(p.Containers, cp)
	}
	return p
}

// Request translates a pod's asks and options into the placement core's
// Request, defaults applied. It returns a nil Request for a pod that asks no
// vGPU. A malformed ask or annotation is an error that names the container or
// annotation and what was expected.
func Request(pod *corev1.Pod, names api.ResourceNames, d placement.Defaults) (*placement.Request, api.PodOptions, error) {
	asks, _, err := podrequest.Parse(pod, names)
	if err != nil || len(asks) == 0 {
		return nil, api.PodOptions{}, err
	}
	req := &placement.Request{Containers: make([]placement.Container, 0, len(asks))}
	for _, c := range asks {
		req.Containers = append(req.Containers, placement.Container{
			Name: c.Name, Init: c.Init, Restartable: c.Restartable, Number: c.Number,
			MemoryMiB: c.MemoryMiB, MemoryPercent: c.MemoryPercent, Cores: c.Cores,
		})
	}
	opts, err := api.ParsePodOptions(pod.Annotations)
	if err != nil {
		return nil, api.PodOptions{}, err
	}
	req.TypeInclude, req.TypeExclude = opts.TypeInclude, opts.TypeExclude
	req.UUIDInclude, req.UUIDExclude = opts.UUIDInclude, opts.UUIDExclude
	req.Topology, req.DevicePolicy = opts.Topology, opts.DevicePolicy
	req.Mode, req.SpreadGroup, req.MIGProfile = opts.Mode, opts.SpreadGroup, opts.MIGProfile
	if err := req.Normalize(d); err != nil {
		return nil, api.PodOptions{}, err
	}
	return req, opts, nil
}
