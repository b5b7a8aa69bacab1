// Package placementtest builds placement fixtures for tests:
//
//	node := placementtest.Node("n1").GPUs(8, "A100-80GB", 81920).NVLinkPairs().Use(0, 8192, 25).Obj()
//	req := placementtest.Req().GPUs(2, 20480, 50).Topology(placement.TopologyRequired).Obj()
//
// GPU UUIDs are "GPU-<node>-<position>". Unless overridden, every GPU may hold
// 10 tenants and the PCIe tree is that of a two-socket 8-GPU server: GPUs
// 2k and 2k+1 share a switch, GPUs 4k..4k+3 share a host bridge, each half of
// the GPUs sits on one NUMA node.
package placementtest

import (
	"fmt"

	"github.com/volcano-vgpu/volcano-vgpu/plugins/placement"
)

// NVLinks per pair in the builders' topologies.
const (
	PairNVLinks   = 4  // NVLink bridge between two PCIe cards
	SwitchNVLinks = 12 // A100 SXM through NVSwitch
)

// NodeBuilder builds a *placement.Node.
type NodeBuilder struct {
	node  placement.Node
	nv    map[[2]int]int
	pcie  map[[2]int]placement.PCIeLevel
	flat  placement.PCIeLevel
	noMat bool
}

// Node starts a node with no GPUs.
func Node(name string) *NodeBuilder {
	return &NodeBuilder{node: placement.Node{Name: name}, nv: map[[2]int]int{}, pcie: map[[2]int]placement.PCIeLevel{}}
}

// GPUs appends count healthy, idle GPUs of one model.
func (b *NodeBuilder) GPUs(count int, model string, memMiB int64) *NodeBuilder {
	for range count {
		b.GPU(fmt.Sprintf("GPU-%s-%d", b.node.Name, len(b.node.GPUs)), model, memMiB)
	}
	return b
}

// GPU appends one healthy, idle GPU.
func (b *NodeBuilder) GPU(uuid, model string, memMiB int64) *NodeBuilder {
	b.node.GPUs = append(b.node.GPUs, placement.GPU{
		Index: len(b.node.GPUs), UUID: uuid, Model: model, MemoryMiB: memMiB, Healthy: true, MaxShares: 10,
	})
	return b
}

// MaxShares sets every GPU's tenant limit.
func (b *NodeBuilder) MaxShares(n int) *NodeBuilder {
	for i := range b.node.GPUs {
		b.node.GPUs[i].MaxShares = n
	}
	return b
}

// NVLink links GPUs i and j with n NVLinks.
func (b *NodeBuilder) NVLink(i, j, n int) *NodeBuilder {
	b.nv[[2]int{min(i, j), max(i, j)}] = n
	return b
}

// NVLinkPairs bridges GPUs (0,1), (2,3), … with PairNVLinks each.
func (b *NodeBuilder) NVLinkPairs() *NodeBuilder {
	for i := 0; i+1 < len(b.node.GPUs); i += 2 {
		b.NVLink(i, i+1, PairNVLinks)
	}
	return b
}

// NVSwitch links every pair with SwitchNVLinks (all-to-all).
func (b *NodeBuilder) NVSwitch() *NodeBuilder {
	for i := range b.node.GPUs {
		for j := i + 1; j < len(b.node.GPUs); j++ {
			b.NVLink(i, j, SwitchNVLinks)
		}
	}
	return b
}

// PCIe sets the PCIe level between GPUs i and j.
func (b *NodeBuilder) PCIe(i, j int, level placement.PCIeLevel) *NodeBuilder {
	b.pcie[[2]int{min(i, j), max(i, j)}] = level
	return b
}

// FlatPCIe gives every pair the same PCIe level (unless set by PCIe).
func (b *NodeBuilder) FlatPCIe(level placement.PCIeLevel) *NodeBuilder {
	b.flat = level
	return b
}

// NoLinkMatrix publishes no link matrix (PCIe derived from NUMA nodes).
func (b *NodeBuilder) NoLinkMatrix() *NodeBuilder {
	b.noMat = true
	return b
}

// Use adds one tenant holding memMiB and cores on GPU i (100 cores: exclusively).
func (b *NodeBuilder) Use(i int, memMiB int64, cores int) *NodeBuilder {
	g := &b.node.GPUs[i]
	g.UsedMemoryMiB += memMiB
	g.UsedCores += cores
	g.Shares++
	if cores >= 100 {
		g.Exclusive++
	}
	return b
}

// Exclusive adds a tenant holding GPU i whole: all memory, 100 cores.
func (b *NodeBuilder) Exclusive(i int) *NodeBuilder {
	return b.Use(i, b.node.GPUs[i].MemoryMiB, 100)
}

// Unhealthy marks GPUs unhealthy.
func (b *NodeBuilder) Unhealthy(positions ...int) *NodeBuilder {
	for _, i := range positions {
		b.node.GPUs[i].Healthy = false
	}
	return b
}

// Mode sets the sharing mode of GPUs (all of them when no position is given).
func (b *NodeBuilder) Mode(m placement.GPUMode, positions ...int) *NodeBuilder {
	if len(positions) == 0 {
		for i := range b.node.GPUs {
			positions = append(positions, i)
		}
	}
	for _, i := range positions {
		b.node.GPUs[i].Mode = m
	}
	return b
}

// Stale marks the node's inventory stale.
func (b *NodeBuilder) Stale() *NodeBuilder {
	b.node.Stale = true
	return b
}

// Obj returns a new node; later builder calls do not change it.
func (b *NodeBuilder) Obj() *placement.Node {
	n := len(b.node.GPUs)
	half := max((n+1)/2, 1)
	for i := range b.node.GPUs {
		b.node.GPUs[i].NUMA = i / half
	}
	node := b.node
	node.GPUs = append([]placement.GPU(nil), b.node.GPUs...)
	if b.noMat {
		return &node
	}
	node.Links = placement.NewLinks(n)
	for i := 0; i < n; i++ {
		for j := i + 1; j < n; j++ {
			level := b.flat
			if level == placement.PCIeUnknown {
				level = treeLevel(i, j, half)
			}
			if l, ok := b.pcie[[2]int{i, j}]; ok {
				level = l
			}
			node.Links.Set(i, j, placement.Link{NVLinks: b.nv[[2]int{i, j}], PCIe: level})
		}
	}
	return &node
}

func treeLevel(i, j, half int) placement.PCIeLevel {
	switch {
	case i/2 == j/2:
		return placement.PCIeSingle
	case i/4 == j/4:
		return placement.PCIeHostBridge
	case i/half == j/half:
		return placement.PCIeNode
	}
	return placement.PCIeSystem
}

// RequestBuilder builds a *placement.Request.
type RequestBuilder struct{ req placement.Request }

// Req starts an empty request (binpack, topology prefer).
func Req() *RequestBuilder { return &RequestBuilder{} }

// GPUs adds an app container "c<k>" asking n GPUs with memMiB and cores each.
func (b *RequestBuilder) GPUs(n int, memMiB int64, cores int) *RequestBuilder {
	return b.Container(placement.Container{Number: n, MemoryMiB: memMiB, Cores: cores})
}

// Percent adds an app container asking n GPUs with pct% of each GPU's memory.
func (b *RequestBuilder) Percent(n, pct, cores int) *RequestBuilder {
	return b.Container(placement.Container{Number: n, MemoryPercent: pct, Cores: cores})
}

// Init adds an init container "c<k>".
func (b *RequestBuilder) Init(n int, memMiB int64, cores int) *RequestBuilder {
	return b.Container(placement.Container{Init: true, Number: n, MemoryMiB: memMiB, Cores: cores})
}

// Sidecar adds a restartable init container (restartPolicy Always).
func (b *RequestBuilder) Sidecar(n int, memMiB int64, cores int) *RequestBuilder {
	return b.Container(placement.Container{Init: true, Restartable: true, Number: n, MemoryMiB: memMiB, Cores: cores})
}

// Container adds c, naming it "c<k>" when unnamed.
func (b *RequestBuilder) Container(c placement.Container) *RequestBuilder {
	if c.Name == "" {
		c.Name = fmt.Sprintf("c%d", len(b.req.Containers))
	}
	b.req.Containers = append(b.req.Containers, c)
	return b
}

// Policy sets the device policy.
func (b *RequestBuilder) Policy(p placement.Policy) *RequestBuilder {
	b.req.DevicePolicy = p
	return b
}

// Topology sets the topology mode.
func (b *RequestBuilder) Topology(m placement.TopologyMode) *RequestBuilder {
	b.req.Topology = m
	return b
}

// TypeInclude sets the model include filter.
func (b *RequestBuilder) TypeInclude(s ...string) *RequestBuilder {
	b.req.TypeInclude = s
	return b
}

// TypeExclude sets the model exclude filter.
func (b *RequestBuilder) TypeExclude(s ...string) *RequestBuilder {
	b.req.TypeExclude = s
	return b
}

// UUIDInclude sets the UUID include filter.
func (b *RequestBuilder) UUIDInclude(s ...string) *RequestBuilder {
	b.req.UUIDInclude = s
	return b
}

// UUIDExclude sets the UUID exclude filter.
func (b *RequestBuilder) UUIDExclude(s ...string) *RequestBuilder {
	b.req.UUIDExclude = s
	return b
}

// Mode sets the sharing mode every GPU of the request must be in.
func (b *RequestBuilder) Mode(m placement.GPUMode) *RequestBuilder {
	b.req.Mode = m
	return b
}

// SpreadGroup keeps the request off GPUs holding tasks of its job.
func (b *RequestBuilder) SpreadGroup() *RequestBuilder {
	b.req.SpreadGroup = true
	return b
}

// Obj returns a copy of the request.
func (b *RequestBuilder) Obj() *placement.Request {
	r := b.req
	r.Containers = append([]placement.Container(nil), b.req.Containers...)
	return &r
}
