// Package reference packs a benchmark trace offline, all at once, with the
// scheduler's own per-node rules (package plugins/placement: the same Fit,
// device choice and topology rules vc-scheduler applies), so the online
// schedulers' packing has something to be measured against. It tries
// first-fit and best-fit over the jobs sorted largest first and keeps the
// packing that placed the most GPU memory. Gangs are all or nothing. It is
// pure: inventories and the trace in, placements out.
package reference

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/volcano-vgpu/volcano-vgpu/api"
	"github.com/volcano-vgpu/volcano-vgpu/e2e/bench/metrics"
	"github.com/volcano-vgpu/volcano-vgpu/e2e/bench/trace"
	"github.com/volcano-vgpu/volcano-vgpu/plugins/placement"
)

// Algorithm names one packing order.
type Algorithm string

// Algorithms, in the order they are tried (ties keep the earlier).
const (
	FirstFit          Algorithm = "first-fit decreasing"
	FirstFitLargeGPUs Algorithm = "first-fit decreasing, nodes with the largest GPUs first"
	BestFit           Algorithm = "best-fit decreasing"
)

// algorithms are tried in this order.
var algorithms = []Algorithm{FirstFit, FirstFitLargeGPUs, BestFit}

// Result is the best packing found.
type Result struct {
	Algorithm Algorithm
	Pods      []metrics.Pod // every pod of the trace; Node "" when not placed
	// MemoryMiB is the GPU memory each algorithm placed.
	MemoryMiB map[Algorithm]int64
}

// Pack places jobs on the nodes (usage zero) with every algorithm and
// returns the one that placed the most GPU memory.
func Pack(jobs []trace.Job, nodes map[string]api.Inventory) (Result, error) {
	names := make([]string, 0, len(nodes))
	for n, inv := range nodes {
		if len(inv.GPUs) > 0 {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	base := make([]*placement.Node, 0, len(names))
	for _, n := range names {
		base = append(base, nodeOf(n, nodes[n]))
	}
	reqs := make([]placement.Request, len(jobs))
	for i, j := range jobs {
		r, err := requestOf(j)
		if err != nil {
			return Result{}, err
		}
		reqs[i] = r
	}
	order := decreasing(jobs)
	res := Result{MemoryMiB: map[Algorithm]int64{}}
	best := int64(-1)
	for _, a := range algorithms {
		pods, mem, err := run(a, jobs, reqs, order, base)
		if err != nil {
			return Result{}, fmt.Errorf("%s: %w", a, err)
		}
		res.MemoryMiB[a] = mem
		if mem > best {
			best, res.Algorithm, res.Pods = mem, a, pods
		}
	}
	return res, nil
}

// decreasing orders job indexes largest first: GPUs asked (pods × GPUs per
// pod), then memory per GPU (a whole GPU above any fraction), then cores,
// then trace order.
func decreasing(jobs []trace.Job) []int {
	size := func(j trace.Job) (int, int64, int) {
		mem := j.MemoryMiB
		if j.Kind != trace.Fraction {
			mem = 1 << 40
		}
		return j.Pods * j.GPUs, mem, j.Cores
	}
	order := make([]int, len(jobs))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int {
		ga, ma, ca := size(jobs[a])
		gb, mb, cb := size(jobs[b])
		return cmp.Or(cmp.Compare(gb, ga), cmp.Compare(mb, ma), cmp.Compare(cb, ca))
	})
	return order
}

// run packs with one algorithm on a fresh copy of the nodes.
func run(a Algorithm, jobs []trace.Job, reqs []placement.Request, order []int, base []*placement.Node) ([]metrics.Pod, int64, error) {
	nodes := make([]*placement.Node, len(base))
	for i, n := range base {
		nodes[i] = n.Clone()
	}
	if a == FirstFitLargeGPUs {
		slices.SortStableFunc(nodes, func(x, y *placement.Node) int { return cmp.Compare(y.GPUs[0].MemoryMiB, x.GPUs[0].MemoryMiB) })
	}
	var f placement.Fitter
	var pods []metrics.Pod
	var mem int64
	for _, ji := range order {
		j := jobs[ji]
		var placed []placed
		for range j.Pods {
			p, ok := choose(a, &f, &reqs[ji], nodes)
			if !ok {
				break
			}
			if err := placement.Apply(p.node, p.at); err != nil {
				return nil, 0, err
			}
			placed = append(placed, p)
		}
		if len(placed) < j.Pods { // all or nothing
			for _, p := range placed {
				if err := placement.Release(p.node, p.at); err != nil {
					return nil, 0, err
				}
			}
			placed = nil
		}
		for r := range j.Pods {
			pod := metrics.Pod{Job: ji}
			if r < len(placed) {
				pod.Node = placed[r].node.Name
				pod.Containers = shares(placed[r].at)
				for _, c := range pod.Containers {
					for _, s := range c {
						mem += s.MemoryMiB
					}
				}
			}
			pods = append(pods, pod)
		}
	}
	return pods, mem, nil
}

type placed struct {
	node *placement.Node
	at   placement.Placement
}

// choose finds the node for one pod: the first that fits, or for best-fit
// the one left with the least free GPU memory (first of equals).
func choose(a Algorithm, f *placement.Fitter, req *placement.Request, nodes []*placement.Node) (placed, bool) {
	var best placed
	bestFree := int64(-1)
	for _, n := range nodes {
		p, reasons := f.Fit(req, n, nil)
		if len(reasons) > 0 || len(p.Containers) == 0 {
			continue
		}
		if a != BestFit {
			return placed{n, p.Clone()}, true
		}
		free := freeMiB(n) - placedMiB(p)
		if bestFree < 0 || free < bestFree {
			best, bestFree = placed{n, p.Clone()}, free
		}
	}
	return best, bestFree >= 0
}

func freeMiB(n *placement.Node) int64 {
	var free int64
	for i := range n.GPUs {
		free += max(n.GPUs[i].FreeMemoryMiB(), 0)
	}
	return free
}

func placedMiB(p placement.Placement) int64 {
	var m int64
	for _, c := range p.Containers {
		for _, d := range c.Devices {
			m += d.MemoryMiB
		}
	}
	return m
}

func shares(p placement.Placement) [][]metrics.Share {
	var out [][]metrics.Share
	for _, c := range p.Containers {
		if len(c.Devices) == 0 {
			continue
		}
		var s []metrics.Share
		for _, d := range c.Devices {
			s = append(s, metrics.Share{UUID: d.UUID, MemoryMiB: d.MemoryMiB, Cores: d.Cores})
		}
		out = append(out, s)
	}
	return out
}

// requestOf is one pod of job j as the vgpu plugin reads it (runner.Pod
// makes the same asks: whole GPUs are vgpu-memory-percentage 100 and
// vgpu-cores 100), with the plugin's defaults (binpack, topology prefer).
func requestOf(j trace.Job) (placement.Request, error) {
	c := placement.Container{Name: "main", Number: j.GPUs, MemoryMiB: j.MemoryMiB, Cores: j.Cores}
	if j.MemoryMiB == 0 {
		c.MemoryPercent = 100
	}
	r := placement.Request{Containers: []placement.Container{c}}
	if err := r.Normalize(placement.Defaults{DevicePolicy: placement.Binpack, Topology: placement.TopologyPrefer}); err != nil {
		return r, fmt.Errorf("job %s: %w", j.Name, err)
	}
	return r, nil
}

// nodeOf is the placement core's node for a published inventory (as the
// vgpu plugin builds it), usage zero.
func nodeOf(name string, inv api.Inventory) *placement.Node {
	n := &placement.Node{Name: name, GPUs: make([]placement.GPU, len(inv.GPUs))}
	for i, g := range inv.GPUs {
		n.GPUs[i] = placement.GPU{Index: g.Index, UUID: g.UUID, Model: g.Model, MemoryMiB: g.MemoryMiB,
			Healthy: g.Healthy, NUMA: g.NUMA, MaxShares: g.MaxShares}
	}
	if len(inv.GPUs) <= placement.MaxGPUs && len(inv.NVLinks) == len(inv.GPUs) && len(inv.PCIe) == len(inv.GPUs) {
		n.Links = placement.NewLinks(len(inv.GPUs))
		for i := range inv.GPUs {
			for j := i + 1; j < len(inv.GPUs); j++ {
				l := inv.Link(i, j)
				level := placement.PCIeUnknown
				if l.PCIe.Valid() {
					level = placement.PCIeInternal + placement.PCIeLevel(l.PCIe-api.PCIeInternal)
				}
				n.Links.Set(i, j, placement.Link{NVLinks: l.NVLinks, PCIe: level})
			}
		}
	}
	return n
}
