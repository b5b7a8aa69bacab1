// Package metrics computes the benchmark's packing figures from where the
// pods went (their GPU shares) and the nodes' published inventories. It is
// pure: the runner reads the cluster, this package only counts.
package metrics

import (
	"slices"

	"github.com/volcano-vgpu/volcano-vgpu/api"
	"github.com/volcano-vgpu/volcano-vgpu/e2e/bench/trace"
)

// Share is one container's use of one GPU.
type Share struct {
	UUID      string
	MemoryMiB int64
	Cores     int
}

// Pod is where one pod of the trace went.
type Pod struct {
	Job  int    // index of its job in the trace
	Node string // "" while unbound
	// Containers lists each GPU container's shares; empty for a pod without
	// GPUs (the CPU-only baseline) or whose scheduler wrote no placement.
	Containers [][]Share
}

// Packing is how the GPUs were used at the end of a run.
type Packing struct {
	GPUsUsed   int // GPUs with at least one tenant
	PartlyUsed int // used GPUs with room left (memory, cores and tenant slots all free): fragmentation
	OverBooked int // GPUs booked beyond their memory, 100% cores or their tenant slots
	MultiGPU   int // placed containers of more than one GPU
	BestLinked int // of MultiGPU, those on the best-connected set available (see BestSet)
	Unknown    int // bound GPU pods without a readable placement
	// MemoryMiB is the GPU memory booked by the placed containers (a whole
	// GPU books all of its memory).
	MemoryMiB int64
}

// usage is what the tenants of one GPU booked.
type usage struct {
	memMiB  int64
	cores   int
	tenants int
}

// Pack computes the packing of pods on the nodes' GPUs.
// Every pod is taken to ask GPUs.
func Pack(nodes map[string]api.Inventory, pods []Pod) Packing {
	var p Packing
	used := map[string]*usage{}
	for _, pod := range pods {
		if pod.Node == "" {
			continue
		}
		if len(pod.Containers) == 0 {
			p.Unknown++
		}
		for _, c := range pod.Containers {
			for _, s := range c {
				u := used[s.UUID]
				if u == nil {
					u = &usage{}
					used[s.UUID] = u
				}
				u.memMiB += s.MemoryMiB
				p.MemoryMiB += s.MemoryMiB
				u.cores += s.Cores
				u.tenants++
			}
		}
	}
	for _, inv := range nodes {
		for _, g := range inv.GPUs {
			u, ok := used[g.UUID]
			if !ok {
				continue
			}
			p.GPUsUsed++
			if u.memMiB > g.MemoryMiB || u.cores > 100 || u.tenants > g.MaxShares {
				p.OverBooked++
			}
			if u.memMiB < g.MemoryMiB && u.cores < 100 && u.tenants < g.MaxShares {
				p.PartlyUsed++
			}
		}
	}
	for _, pod := range pods {
		inv, ok := nodes[pod.Node]
		for _, c := range pod.Containers {
			if len(c) < 2 {
				continue
			}
			p.MultiGPU++
			if ok && BestSet(inv, c, used) {
				p.BestLinked++
			}
		}
	}
	return p
}

// quality ranks a GPU set by the paths its peer traffic takes: more NVLinks
// over all pairs first, then the shorter PCIe distance over the pairs that
// have no NVLink (an NVLinked pair's traffic does not cross PCIe, so on an
// NVSwitch board every set ties here), then fewer NUMA nodes spanned.
type quality struct{ nvlinks, pcie, numa int }

func (q quality) better(o quality) bool {
	if q.nvlinks != o.nvlinks {
		return q.nvlinks > o.nvlinks
	}
	if q.pcie != o.pcie {
		return q.pcie < o.pcie
	}
	return q.numa < o.numa
}

func qualityOf(inv api.Inventory, pos []int) quality {
	var q quality
	var numa []int
	for a := range pos {
		if n := inv.GPUs[pos[a]].NUMA; !slices.Contains(numa, n) {
			numa = append(numa, n)
		}
		for b := a + 1; b < len(pos); b++ {
			l := inv.Link(pos[a], pos[b])
			q.nvlinks += l.NVLinks
			if l.NVLinks == 0 {
				q.pcie += int(l.PCIe)
			}
		}
	}
	q.numa = len(numa)
	return q
}

// BestSet reports whether container c sits on a best-connected set of its
// node's GPUs among those available to it: its own GPUs plus every healthy
// GPU that, at the end of the run (used), could still take one more share
// of c's size. GPUs free at the end were free when c was placed (nothing is
// deleted during a run), so a better set found here was a missed chance.
func BestSet(inv api.Inventory, c []Share, used map[string]*usage) bool {
	pos := map[string]int{}
	for i, g := range inv.GPUs {
		pos[g.UUID] = i
	}
	own := make([]int, 0, len(c))
	for _, s := range c {
		i, ok := pos[s.UUID]
		if !ok {
			return false
		}
		own = append(own, i)
	}
	mem, cores := c[0].MemoryMiB, c[0].Cores
	cands := slices.Clone(own)
	for i, g := range inv.GPUs {
		if slices.Contains(own, i) || !g.Healthy {
			continue
		}
		u := used[g.UUID]
		if u == nil {
			u = &usage{}
		}
		if u.tenants < g.MaxShares && g.MemoryMiB-u.memMiB >= mem && u.cores+cores <= 100 && (cores < 100 || u.tenants == 0) {
			cands = append(cands, i)
		}
	}
	slices.Sort(cands)
	mine := qualityOf(inv, own)
	better := false
	subsets(cands, len(own), func(set []int) bool {
		better = qualityOf(inv, set).better(mine)
		return !better
	})
	return !better
}

// subsets calls f with every k-subset of from until f returns false.
func subsets(from []int, k int, f func([]int) bool) {
	set := make([]int, 0, k)
	var rec func(start int) bool
	rec = func(start int) bool {
		if len(set) == k {
			return f(set)
		}
		for i := start; i <= len(from)-(k-len(set)); i++ {
			set = append(set, from[i])
			if !rec(i + 1) {
				return false
			}
			set = set[:len(set)-1]
		}
		return true
	}
	rec(0)
}

// Prefix is how far into the trace the scheduler got before the first job
// it left unplaced.
type Prefix struct {
	Jobs int     // jobs before the first unplaced one (all of them if none)
	Pods float64 // share of the trace's pods in those jobs, 0..1
}

// PlacedPrefix walks the trace in order and stops at the first job with a
// pod left unbound.
func PlacedPrefix(jobs []trace.Job, pods []Pod) Prefix {
	bound := make([]int, len(jobs))
	for _, p := range pods {
		if p.Node != "" && p.Job >= 0 && p.Job < len(jobs) {
			bound[p.Job]++
		}
	}
	total := trace.Sum(jobs).Pods
	var out Prefix
	placed := 0
	for i, j := range jobs {
		if bound[i] < j.Pods {
			break
		}
		out.Jobs++
		placed += j.Pods
	}
	if total > 0 {
		out.Pods = float64(placed) / float64(total)
	}
	return out
}

// FromAssignment lists the shares of our plugin's assignment annotation,
// app containers only (init containers run before them and free their GPUs).
func FromAssignment(a api.Assignment) [][]Share {
	var out [][]Share
	for _, c := range a.Containers {
		if c.Init {
			continue
		}
		var shares []Share
		for _, d := range c.Devices {
			shares = append(shares, Share{UUID: d.UUID, MemoryMiB: d.MemoryMiB, Cores: d.Cores})
		}
		out = append(out, shares)
	}
	return out
}

// Median of xs (0 for none); xs is not modified.
func Median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if n := len(s); n%2 == 1 {
		return s[n/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
