package placement

import "math/bits"

// ensureLinks points f at the node's link data: its own Links when they cover
// the node, else a matrix derived from NUMA nodes (no NVLink), built here.
func (f *Fitter) ensureLinks() {
	if f.linksOK {
		return
	}
	f.linksOK = true
	n := len(f.node.GPUs)
	if l := &f.node.Links; l.n == n {
		f.nv, f.cost, f.adj, f.maxNV = l.nv, l.cost, l.adj, l.maxNV
		return
	}
	if cap(f.ownNV) < n*n {
		f.ownNV, f.ownCost = make([]uint8, n*n), make([]uint8, n*n)
	}
	f.nv, f.cost, f.adj, f.maxNV = f.ownNV[:n*n], f.ownCost[:n*n], f.ownAdj[:n], 0
	clear(f.nv)
	clear(f.adj)
	for i := 0; i < n; i++ {
		for j := 0; j < n; j++ {
			f.cost[i*n+j] = 0
			if i != j {
				f.cost[i*n+j] = peerCost(0, f.node.link(i, j).PCIe)
			}
		}
	}
}

// fragmentation measures how whole the NVLink islands of the GPUs in free
// are: the sum of squared island sizes (higher = less fragmented). With
// remove > 0 it returns an upper bound of that measure after any remove more
// GPUs leave free: removing whole smallest islands first keeps the most.
func fragmentation(free uint64, adj []uint64, remove int) int64 {
	var sizes [MaxGPUs]int8
	k := 0
	for rest := free; rest != 0; k++ {
		comp := island(rest&-rest, rest, adj)
		rest &^= comp
		sizes[k] = int8(bits.OnesCount64(comp))
	}
	if remove > 0 {
		for i := 1; i < k; i++ { // insertion sort, k <= 64
			for j := i; j > 0 && sizes[j] < sizes[j-1]; j-- {
				sizes[j], sizes[j-1] = sizes[j-1], sizes[j]
			}
		}
	}
	var sum int64
	for _, s := range sizes[:k] {
		take := min(int(s), max(remove, 0))
		remove -= take
		left := int64(int(s) - take)
		sum += left * left
	}
	return sum
}

// island grows seed to everything NVLink-reachable from it within within.
func island(seed, within uint64, adj []uint64) uint64 {
	comp, frontier := seed, seed
	for frontier != 0 {
		v := bits.TrailingZeros64(frontier)
		frontier &= frontier - 1
		next := adj[v] & within &^ comp
		comp |= next
		frontier |= next
	}
	return comp
}

// connected reports whether the GPUs in set form one NVLink island.
func connected(set uint64, adj []uint64) bool {
	return set == 0 || island(set&-set, set, adj) == set
}

// bestMinNV is the most NVLinks the weakest pair of any n GPUs among the
// node's healthy, filter-matching GPUs can have, regardless of usage: what
// TopologyRequired holds a placement to. 0 when no n of them are all
// pairwise NVLinked.
func (f *Fitter) bestMinNV(n int) int64 {
	f.ensureLinks()
	var pool uint64
	for pos := range f.node.GPUs {
		if g := &f.node.GPUs[pos]; g.Healthy && f.req.admits(g) == CodeOK {
			pool |= 1 << pos
		}
	}
	g := len(f.node.GPUs)
	var buf [MaxGPUs]uint64
	adjT := buf[:g]
	for t := f.maxNV; t >= 1; t-- {
		clear(adjT[:g])
		present := false
		for i := 0; i < g; i++ {
			for j := 0; j < g; j++ {
				if v := int64(f.nv[i*g+j]); i != j && v >= t {
					adjT[i] |= 1 << j
					present = present || v == t
				}
			}
		}
		if present && hasClique(pool, n, adjT) {
			return t
		}
	}
	return 0
}

// hasClique reports whether need vertices of cands are pairwise adjacent.
func hasClique(cands uint64, need int, adj []uint64) bool {
	if need <= 0 {
		return true
	}
	for c := cands; bits.OnesCount64(c) >= need; {
		v := bits.TrailingZeros64(c)
		c &= c - 1 // c now holds the candidates above v
		if hasClique(c&adj[v], need-1, adj) {
			return true
		}
	}
	return false
}

// gangGain is a GPU's affinity to the job's already-placed tasks on this
// node. binpack: NVLinks to every sibling GPU, and more than any NVLink for
// the sibling's own GPU; spread: minus the siblings on it.
func (f *Fitter) gangGain(pos int) int64 {
	if !f.hasSib {
		return 0
	}
	if f.req.policy() == Spread {
		return -int64(f.sib[pos])
	}
	g := len(f.node.GPUs)
	var gain int64
	for q := 0; q < g; q++ {
		if f.sib[q] == 0 {
			continue
		}
		w := int64(f.nv[pos*g+q])
		if q == pos {
			w = f.maxNV + 1
		}
		gain += int64(f.sib[q]) * w
	}
	return gain
}

// BestLinked reports whether devs, the n >= 2 GPUs of one container placed on
// node, have as their weakest pair as many NVLinks as the best n healthy GPUs
// of node that req admits, usage aside: the container got the node's
// best-linked set (whether others held it or not). It is false for fewer than
// two GPUs, or GPUs not on node. For the scheduler's placement metrics: it is
// not on the predicate path.
func (f *Fitter) BestLinked(req *Request, node *Node, devs []Device) bool {
	if len(devs) < 2 {
		return false
	}
	f.prepare(req, node, nil)
	f.ensureLinks()
	g := len(node.GPUs)
	var pos [MaxGPUs]int
	for i, d := range devs {
		if pos[i] = node.pos(d.UUID, d.Pos); pos[i] < 0 {
			return false
		}
	}
	weakest := int64(-1)
	for i := range devs {
		for j := i + 1; j < len(devs); j++ {
			if v := int64(f.nv[pos[i]*g+pos[j]]); weakest < 0 || v < weakest {
				weakest = v
			}
		}
	}
	return weakest >= f.bestMinNV(len(devs))
}
