package placementtest

import (
	"github.com/volcano-vgpu/volcano-vgpu/api"
	"github.com/volcano-vgpu/volcano-vgpu/plugins/placement"
)

// MIGA100x40 is the on-demand MIG geometry of an A100 40GB: NVIDIA's
// published profiles and placements (memory slices 0-7).
func MIGA100x40() *placement.MIG {
	at := func(size int, starts ...int) []api.MIGPlacement {
		out := make([]api.MIGPlacement, len(starts))
		for i, s := range starts {
			out[i] = api.MIGPlacement{Start: s, Size: size}
		}
		return out
	}
	return &placement.MIG{MemorySlices: 8, Profiles: []api.MIGProfile{
		{Name: "1g.5gb", Slices: 1, MemoryMiB: 4864, Instances: 7, Placements: at(1, 0, 1, 2, 3, 4, 5, 6)},
		{Name: "2g.10gb", Slices: 2, MemoryMiB: 9856, Instances: 3, Placements: at(2, 0, 2, 4)},
		{Name: "3g.20gb", Slices: 3, MemoryMiB: 19968, Instances: 2, Placements: at(4, 0, 4)},
		{Name: "4g.20gb", Slices: 4, MemoryMiB: 19968, Instances: 1, Placements: at(4, 0)},
		{Name: "7g.40gb", Slices: 7, MemoryMiB: 40192, Instances: 1, Placements: at(8, 0)},
		{Name: "1g.5gb+me", Slices: 1, MemoryMiB: 4864, Instances: 1, Placements: at(1, 0, 1, 2, 3, 4, 5, 6)},
		{Name: "1g.10gb", Slices: 1, MemoryMiB: 9856, Instances: 4, Placements: at(2, 0, 2, 4, 6)},
	}}
}

// MIG puts GPUs (all when no position is given) in mode mig with a copy of
// geometry m.
func (b *NodeBuilder) MIG(m *placement.MIG, positions ...int) *NodeBuilder {
	if len(positions) == 0 {
		for i := range b.node.GPUs {
			positions = append(positions, i)
		}
	}
	for _, i := range positions {
		c := *m
		c.Instances = append([]api.MIGInstance(nil), m.Instances...)
		b.node.GPUs[i].Mode, b.node.GPUs[i].MIG = api.ModeMIG, &c
	}
	return b
}

// Fixed makes the geometry of MIG GPU i fixed: its instances only.
func (b *NodeBuilder) Fixed(i int) *NodeBuilder {
	b.node.GPUs[i].MIG.Fixed = true
	return b
}

// Instance adds an existing, idle instance of profile at start (its size
// from the profile's placements) on MIG GPU i.
func (b *NodeBuilder) Instance(i int, profile string, start int, uuid string) *NodeBuilder {
	return b.instance(i, profile, start, uuid, false)
}

// InstanceInUse adds an existing instance processes run on.
func (b *NodeBuilder) InstanceInUse(i int, profile string, start int, uuid string) *NodeBuilder {
	return b.instance(i, profile, start, uuid, true)
}

func (b *NodeBuilder) instance(i int, profile string, start int, uuid string, inUse bool) *NodeBuilder {
	m := b.node.GPUs[i].MIG
	size := 0
	for _, p := range m.Profiles {
		if p.Name == profile {
			size = p.Placements[0].Size
		}
	}
	m.Instances = append(m.Instances, api.MIGInstance{Profile: profile, Placement: api.MIGPlacement{Start: start, Size: size}, UUID: uuid, InUse: inUse})
	return b
}

// HoldMIG books memory slices start..start+size-1 of MIG GPU i, as a pod
// assigned an instance there does.
func (b *NodeBuilder) HoldMIG(i, start, size int) *NodeBuilder {
	b.node.GPUs[i].MIGHeld |= (1<<size - 1) << start
	return b
}

// MIGProfile names the MIG profile every GPU container gets (mode mig).
func (b *RequestBuilder) MIGProfile(name string) *RequestBuilder {
	b.req.MIGProfile, b.req.Mode = name, api.ModeMIG
	return b
}
