// Package simconfig reads the simulated-cluster files in e2e/sim/clusters:
// which nodes exist and which GPUs, NVLinks and NUMA nodes each has. The
// local cluster creates the nodes from it and the simulation build of the
// device plugin (e2e/cmd/vgpu-device-plugin-sim) builds its mock NVML from
// it, so both see the same UUIDs.
package simconfig

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/volcano-vgpu/volcano-vgpu/e2e/sim/migtable"
)

// Version is the only accepted value of File.Version.
const Version = "v1"

// Topology names how the GPUs of a node are linked.
type Topology string

const (
	TopologyNVSwitch Topology = "nvswitch" // all-to-all through NVSwitch
	TopologyPairs    Topology = "pairs"    // NVLink bridges (0,1)(2,3)…
	TopologyPCIe     Topology = "pcie"     // no NVLink
)

// File is one e2e/sim/clusters/*.yaml.
type File struct {
	Version string  `json:"version"`
	Groups  []Group `json:"nodes"`
}

// Group is a set of identical nodes named Prefix-0 … Prefix-(Count-1).
type Group struct {
	Prefix    string            `json:"namePrefix"`
	Count     int               `json:"count"`
	CPU       string            `json:"cpu"`
	Memory    string            `json:"memory"`
	Pods      int               `json:"pods"`
	Labels    map[string]string `json:"labels,omitempty"`
	Model     string            `json:"gpuModel"`
	GPUs      int               `json:"gpus"`
	MemoryMiB int64             `json:"gpuMemoryMiB"`
	// ReservedMiB is what the driver keeps of each GPU for itself (NVML's
	// memory v2 "reserved": a few hundred MiB on real cards); default 0.
	ReservedMiB int64    `json:"gpuReservedMiB,omitempty"`
	Topology    Topology `json:"topology"`
	NVLinks     int      `json:"nvlinksPerPair"`
	// NUMA lists the NUMA node of each GPU; empty means all on node 0.
	NUMA      []int `json:"numa,omitempty"`
	MaxShares int   `json:"maxShares"`
	// MIGGPUs lists the GPUs (by index) whose MIG mode is on, as
	// nvidia-smi -i N -mig 1 leaves them; only models with a MIG table
	// (migtable.Models) can be listed.
	MIGGPUs []int `json:"migGPUs,omitempty"`
}

// GPU is one simulated GPU.
type GPU struct {
	Index       int
	UUID        string
	BusID       string
	Model       string
	MemoryMiB   int64 // physical, as NVML's total
	ReservedMiB int64 // of MemoryMiB, kept by the driver
	NUMA        int
	MaxShares   int
	MIG         bool // MIG mode on
}

// Node is one simulated node.
type Node struct {
	Name     string
	CPU      string
	Memory   string
	Pods     int
	Labels   map[string]string
	GPUs     []GPU
	Topology Topology
	NVLinks  int
}

// NVLinkCount returns the number of NVLinks between GPUs i and j.
func (n *Node) NVLinkCount(i, j int) int {
	if i == j {
		return 0
	}
	switch n.Topology {
	case TopologyNVSwitch:
		return n.NVLinks
	case TopologyPairs:
		if i/2 == j/2 {
			return n.NVLinks
		}
	}
	return 0
}

// Load reads and validates one file.
func Load(path string) (File, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return File{}, fmt.Errorf("simulated cluster file: %w", err)
	}
	f, err := Parse(data)
	if err != nil {
		return File{}, fmt.Errorf("simulated cluster file %s: %w", path, err)
	}
	return f, nil
}

// Parse decodes and validates a file's contents; unknown keys are errors.
func Parse(data []byte) (File, error) {
	var f File
	if err := yaml.UnmarshalStrict(bytes.TrimSpace(data), &f); err != nil {
		return File{}, err
	}
	return f, f.Validate()
}

// Validate checks every group.
func (f File) Validate() error {
	if f.Version != Version {
		return fmt.Errorf("version: expected %q, got %q", Version, f.Version)
	}
	if len(f.Groups) == 0 {
		return errors.New("nodes: expected at least one node group")
	}
	prefixes := map[string]bool{}
	for i, g := range f.Groups {
		field := func(name string) string { return fmt.Sprintf("nodes[%d].%s", i, name) }
		switch {
		case g.Prefix == "" || prefixes[g.Prefix]:
			return fmt.Errorf("%s: expected a unique node name prefix, got %q", field("namePrefix"), g.Prefix)
		case g.Count < 1:
			return fmt.Errorf("%s: expected at least 1, got %d", field("count"), g.Count)
		case g.GPUs < 1 || g.GPUs > 16:
			return fmt.Errorf("%s: expected 1 to 16 GPUs, got %d", field("gpus"), g.GPUs)
		case g.Model == "":
			return fmt.Errorf("%s: expected a GPU model name", field("gpuModel"))
		case g.MemoryMiB <= 0:
			return fmt.Errorf("%s: expected a positive number of MiB, got %d", field("gpuMemoryMiB"), g.MemoryMiB)
		case g.ReservedMiB < 0 || g.ReservedMiB >= g.MemoryMiB:
			return fmt.Errorf("%s: expected 0 or more MiB, less than gpuMemoryMiB (%d), got %d", field("gpuReservedMiB"), g.MemoryMiB, g.ReservedMiB)
		case g.Topology != TopologyNVSwitch && g.Topology != TopologyPairs && g.Topology != TopologyPCIe:
			return fmt.Errorf("%s: expected nvswitch, pairs or pcie, got %q", field("topology"), g.Topology)
		case g.Topology != TopologyPCIe && g.NVLinks < 1:
			return fmt.Errorf("%s: expected at least 1 NVLink per pair for topology %s", field("nvlinksPerPair"), g.Topology)
		case len(g.NUMA) != 0 && len(g.NUMA) != g.GPUs:
			return fmt.Errorf("%s: expected one NUMA node per GPU (%d), got %d", field("numa"), g.GPUs, len(g.NUMA))
		case g.MaxShares < 1 || g.MaxShares > 100:
			return fmt.Errorf("%s: expected 1 to 100, got %d", field("maxShares"), g.MaxShares)
		case g.CPU == "" || g.Memory == "" || g.Pods < 1:
			return fmt.Errorf("%s: expected cpu, memory and pods to be set", field("cpu/memory/pods"))
		}
		if err := g.validateMIG(field("migGPUs")); err != nil {
			return err
		}
		prefixes[g.Prefix] = true
	}
	return nil
}

func (g Group) validateMIG(field string) error {
	if len(g.MIGGPUs) == 0 {
		return nil
	}
	if _, ok := migtable.ForModel(g.Model); !ok {
		return fmt.Errorf("%s: expected a model with a MIG table (%s), got %q", field, strings.Join(migtable.Models(), ", "), g.Model)
	}
	seen := map[int]bool{}
	for _, i := range g.MIGGPUs {
		switch {
		case i < 0 || i >= g.GPUs:
			return fmt.Errorf("%s: expected GPU indexes from 0 to %d, got %d", field, g.GPUs-1, i)
		case seen[i]:
			return fmt.Errorf("%s: expected each GPU once, got %d twice", field, i)
		}
		seen[i] = true
	}
	return nil
}

// WithMIG is n with the MIG mode of the GPUs at the given indexes on, as an
// administrator leaves them with nvidia-smi -i N -mig 1 before restarting
// the node's device plugin; field names the setting in errors.
func (n Node) WithMIG(field string, gpus []int) (Node, error) {
	out := n
	out.GPUs = slices.Clone(n.GPUs)
	for _, i := range gpus {
		if i < 0 || i >= len(n.GPUs) {
			return Node{}, fmt.Errorf("%s: expected GPU indexes of node %s from 0 to %d, got %d", field, n.Name, len(n.GPUs)-1, i)
		}
		if _, ok := migtable.ForModel(n.GPUs[i].Model); !ok {
			return Node{}, fmt.Errorf("%s: GPU %d of node %s is a %s; expected a model with a MIG table (%s)", field, i, n.Name, n.GPUs[i].Model, strings.Join(migtable.Models(), ", "))
		}
		out.GPUs[i].MIG = true
	}
	return out, nil
}

// Nodes expands the groups into nodes, in a stable order. UUIDs and PCI bus
// IDs are derived from the node name, so every reader gets the same ones.
func (f File) Nodes() []Node {
	var nodes []Node
	for _, g := range f.Groups {
		for k := 0; k < g.Count; k++ {
			n := Node{
				Name: fmt.Sprintf("%s-%d", g.Prefix, k), CPU: g.CPU, Memory: g.Memory, Pods: g.Pods,
				Labels: g.Labels, Topology: g.Topology, NVLinks: g.NVLinks,
			}
			for i := 0; i < g.GPUs; i++ {
				numa := 0
				if len(g.NUMA) > 0 {
					numa = g.NUMA[i]
				}
				n.GPUs = append(n.GPUs, GPU{
					Index: i, UUID: uuidFor(n.Name, i), BusID: fmt.Sprintf("00000000:%02X:00.0", 0x10+i*0x10),
					Model: g.Model, MemoryMiB: g.MemoryMiB, ReservedMiB: g.ReservedMiB, NUMA: numa, MaxShares: g.MaxShares,
					MIG: slices.Contains(g.MIGGPUs, i),
				})
			}
			nodes = append(nodes, n)
		}
	}
	return nodes
}

// Find returns the node with the given name.
func (f File) Find(name string) (Node, bool) {
	for _, n := range f.Nodes() {
		if n.Name == name {
			return n, true
		}
	}
	return Node{}, false
}

func uuidFor(node string, index int) string {
	h := sha256.Sum256(fmt.Appendf(nil, "%s/%d", node, index))
	return fmt.Sprintf("GPU-%x-%x-%x-%x-%x", h[0:4], h[4:6], h[6:8], h[8:10], h[10:16])
}
