package view

import (
	"fmt"
	"sort"
	"time"

	"github.com/volcano-vgpu/volcano-vgpu/api"
)

// GPURow is one GPU of a node.
type GPURow struct {
	Node               string      `json:"node"`
	Index              int         `json:"index"`
	UUID               string      `json:"uuid"`
	Model              string      `json:"model"`
	Healthy            bool        `json:"healthy"`
	Stale              bool        `json:"stale"` // the node's inventory heartbeat is too old: the scheduler places nothing there
	Mode               api.GPUMode `json:"mode"`
	MemoryMiB          int64       `json:"memoryMiB"`
	AllocatedMemoryMiB int64       `json:"allocatedMemoryMiB"`
	AllocatedCores     int         `json:"allocatedCores"` // percent of the GPU, summed over tenants
	Tenants            []string    `json:"tenants"`        // namespace/pod/container
	MaxTenants         int         `json:"maxTenants"`
}

// NodeProblem is a GPU node whose inventory cannot be read.
type NodeProblem struct {
	Node  string `json:"node"`
	Error string `json:"error"`
}

// NodesReport is `kubectl vgpu nodes`.
type NodesReport struct {
	GPUs     []GPURow      `json:"gpus"`
	Problems []NodeProblem `json:"problems,omitempty"`
	// Bookings that could not be applied to their node (a GPU the node no
	// longer publishes, an unreadable assignment).
	Bookings []string `json:"bookingProblems,omitempty"`
	// Heartbeats of the nodes' inventories, by node.
	Heartbeats map[string]time.Time `json:"heartbeats"`
}

// Nodes is every GPU of every node that publishes an inventory, with the
// bookings on it.
func (c *cluster) Nodes() NodesReport {
	r := NodesReport{GPUs: []GPURow{}, Heartbeats: map[string]time.Time{}, Bookings: c.problems}
	for _, g := range c.nodes {
		if g.err != nil {
			r.Problems = append(r.Problems, NodeProblem{Node: g.name, Error: g.err.Error()})
			continue
		}
		r.Heartbeats[g.name] = g.heartbeat
		for _, x := range g.node.GPUs {
			row := GPURow{
				Node: g.name, Index: x.Index, UUID: x.UUID, Model: x.Model, Healthy: x.Healthy, Stale: g.node.Stale,
				Mode: x.Mode, MemoryMiB: x.MemoryMiB, AllocatedMemoryMiB: x.UsedMemoryMiB, AllocatedCores: x.UsedCores,
				MaxTenants: x.ShareLimit(), Tenants: []string{},
			}
			for _, t := range g.tenants[x.UUID] {
				row.Tenants = append(row.Tenants, fmt.Sprintf("%s/%s/%s", t.pod.Namespace, t.pod.Name, t.container))
			}
			sort.Strings(row.Tenants)
			r.GPUs = append(r.GPUs, row)
		}
	}
	return r
}

func (r NodesReport) table() [][]string {
	rows := [][]string{{"NODE", "GPU", "MODEL", "HEALTH", "MODE", "MEMORY (MiB)", "CORES", "TENANTS"}}
	for _, g := range r.GPUs {
		health := "healthy"
		if !g.Healthy {
			health = "unhealthy"
		}
		if g.Stale {
			health += ",stale"
		}
		rows = append(rows, []string{
			g.Node, fmt.Sprint(g.Index), g.Model, health, string(g.Mode),
			fmt.Sprintf("%d/%d", g.AllocatedMemoryMiB, g.MemoryMiB), fmt.Sprintf("%d%%", g.AllocatedCores),
			fmt.Sprintf("%d/%d", len(g.Tenants), g.MaxTenants),
		})
	}
	return rows
}

func (r NodesReport) notes() []string {
	var out []string
	for _, p := range r.Problems {
		out = append(out, fmt.Sprintf("node %s: unreadable inventory: %s", p.Node, p.Error))
	}
	for _, b := range r.Bookings {
		out = append(out, "booking not counted: "+b)
	}
	return out
}
