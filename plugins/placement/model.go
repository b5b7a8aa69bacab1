package placement

import (
	"fmt"
	"slices"

	"github.com/volcano-vgpu/volcano-vgpu/api"
)

// MaxGPUs is the largest number of GPUs on one node this package places on.
// Sets of GPUs are bitmasks internally; real nodes carry 8 or 16.
const MaxGPUs = 64

// PCIeLevel is how far apart two GPUs are on the PCIe fabric: the level of their
// closest common ancestor as NVML reports it, named as api.PCIeLevel names it.
// Lower is closer. The core adds PCIeUnknown (the zero value, e.g. no link
// matrix published), which ranks worse than every known level; the adapter's
// conversion (plugins/vgpu/convert.go) maps the wire levels onto these.
type PCIeLevel uint8

// PCIe levels, closest first. The NVML names are in the comments.
const (
	PCIeUnknown    PCIeLevel = iota
	PCIeInternal             // INTERNAL: both GPUs on one board
	PCIeSingle               // SINGLE: one PCIe switch between them
	PCIeMultiple             // MULTIPLE: several switches, no host bridge
	PCIeHostBridge           // HOSTBRIDGE: one CPU host bridge
	PCIeNode                 // NODE: host bridges within one NUMA node
	PCIeSystem               // SYSTEM: across the CPU interconnect
)

var pcieNames = [...]string{"unknown", "internal", "single", "multiple", "hostbridge", "node", "system"}

func (l PCIeLevel) String() string {
	if int(l) < len(pcieNames) {
		return pcieNames[l]
	}
	return fmt.Sprintf("PCIeLevel(%d)", uint8(l))
}

// cost orders levels for comparison: lower is better, unknown is worst.
func (l PCIeLevel) cost() int64 {
	if l == PCIeUnknown || l > PCIeSystem {
		return int64(PCIeSystem) + 1
	}
	return int64(l)
}

// Link is the connection between two GPUs of one node.
type Link struct {
	NVLinks int // active NVLink lanes between the two GPUs (through NVSwitch: per-GPU lanes)
	PCIe    PCIeLevel
}

// Links is the symmetric pairwise link matrix of a node, indexed by position in
// Node.GPUs. The zero value means "no matrix": pairs then have no NVLink and a
// PCIe level derived from the GPUs' NUMA nodes. Besides the matrix it keeps
// what the set search reads (peer cost per pair, NVLink neighbour bitmasks),
// so a Fit does not rebuild them per node.
type Links struct {
	n     int
	nv    []uint8
	pcie  []PCIeLevel
	cost  []uint8  // peer cost: 0 when NVLinked (peer traffic skips PCIe), else the PCIe cost
	adj   []uint64 // NVLink neighbours per GPU (n <= MaxGPUs)
	maxNV int64    // at least the largest NVLink count
}

// NewLinks returns an n×n matrix with no NVLinks and unknown PCIe levels.
func NewLinks(n int) Links {
	l := Links{n: n, nv: make([]uint8, n*n), pcie: make([]PCIeLevel, n*n), cost: make([]uint8, n*n), adj: make([]uint64, n)}
	for i := range l.cost {
		if i%(n+1) != 0 { // not the diagonal
			l.cost[i] = uint8(PCIeUnknown.cost())
		}
	}
	return l
}

// peerCost orders pairs by how their peer traffic travels: NVLinked pairs cost
// nothing on PCIe; the others cost their PCIe level.
func peerCost(nv uint8, level PCIeLevel) uint8 {
	if nv > 0 {
		return 0
	}
	return uint8(level.cost())
}

// Len is the number of GPUs the matrix covers.
func (l Links) Len() int { return l.n }

// Set records the link between GPUs i and j (both directions). NVLink counts
// are clamped to 0..255. Out-of-range positions are ignored.
func (l *Links) Set(i, j int, link Link) {
	if i < 0 || j < 0 || i >= l.n || j >= l.n || i == j {
		return
	}
	nv := uint8(min(max(link.NVLinks, 0), 255))
	l.nv[i*l.n+j], l.nv[j*l.n+i] = nv, nv
	l.pcie[i*l.n+j], l.pcie[j*l.n+i] = link.PCIe, link.PCIe
	c := peerCost(nv, link.PCIe)
	l.cost[i*l.n+j], l.cost[j*l.n+i] = c, c
	l.adj[i] &^= 1 << j
	l.adj[j] &^= 1 << i
	if nv > 0 {
		l.adj[i] |= 1 << j
		l.adj[j] |= 1 << i
	}
	l.maxNV = max(l.maxNV, int64(nv))
}

// At returns the link between GPUs i and j; the zero Link when out of range.
func (l Links) At(i, j int) Link {
	if i < 0 || j < 0 || i >= l.n || j >= l.n {
		return Link{}
	}
	return Link{NVLinks: int(l.nv[i*l.n+j]), PCIe: l.pcie[i*l.n+j]}
}

// Clone returns a deep copy.
func (l Links) Clone() Links {
	return Links{n: l.n, nv: slices.Clone(l.nv), pcie: slices.Clone(l.pcie), cost: slices.Clone(l.cost), adj: slices.Clone(l.adj), maxNV: l.maxNV}
}

// GPU is one physical GPU: its inventory and its current usage. All fields are
// values, so copying a GPU copies everything.
type GPU struct {
	Index     int    // NVML index
	UUID      string // "GPU-…"
	Model     string // e.g. "NVIDIA A100-SXM4-80GB"
	MemoryMiB int64  // capacity
	Healthy   bool
	NUMA      int
	MaxShares int // most tenants at once; <= 0 means 1 (no sharing)
	// Mode is how the GPU is shared; "" is time-sliced, the mode of every
	// GPU the device plugin publishes today.
	Mode GPUMode
	// MIG is the geometry of a GPU in mode mig (nil on the others, and on
	// a MIG GPU NVML could not describe): read-only, shared by copies.
	MIG *MIG

	// Usage. One tenant is one container holding the GPU (see Apply).
	UsedMemoryMiB int64
	UsedCores     int // percent of the GPU's compute, summed over tenants
	Shares        int // tenants
	Exclusive     int // tenants holding it with 100 cores; > 0 admits nobody else
	// MIGHeld: the memory slices booked MIG instances hold (bit i: slice i).
	MIGHeld uint32
	// MIGBooked counts the booked MIG instances per profile (index in
	// MIG.Profiles): a profile allows MIG.Profiles[i].Instances at once.
	MIGBooked [api.MaxMIGProfiles]uint8
}

func (g *GPU) mode() GPUMode {
	if g.Mode == "" {
		return api.ModeTimeSliced
	}
	return g.Mode
}

// FreeMemoryMiB is capacity minus used memory (negative when overcommitted).
func (g *GPU) FreeMemoryMiB() int64 { return g.MemoryMiB - g.UsedMemoryMiB }

// ShareLimit is MaxShares with the "<= 0 means 1" rule applied.
func (g *GPU) ShareLimit() int { return max(g.MaxShares, 1) }

// Node is one GPU node: inventory, usage and topology.
type Node struct {
	Name  string
	GPUs  []GPU // ordered by position; Links is indexed the same way
	Links Links // zero value: no matrix published
	Stale bool  // inventory heartbeat too old: nothing is placed here
}

// Clone returns a deep copy; mutating it (Apply, Release) never touches n.
func (n *Node) Clone() *Node {
	c := *n
	c.GPUs = slices.Clone(n.GPUs)
	c.Links = n.Links.Clone()
	return &c
}

// link is the link between positions i and j, falling back to NUMA nodes when
// the matrix does not cover the node.
func (n *Node) link(i, j int) Link {
	if n.Links.n == len(n.GPUs) {
		return n.Links.At(i, j)
	}
	if n.GPUs[i].NUMA == n.GPUs[j].NUMA {
		return Link{PCIe: PCIeNode}
	}
	return Link{PCIe: PCIeSystem}
}
