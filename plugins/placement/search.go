package placement

import (
	"math"
	"math/bits"
)

// searchBudget bounds the search tree of one container's set selection. 8-GPU
// nodes need at most a few hundred visits; the budget only matters on unusual
// 16+ GPU shapes, where the best set found so far is used.
const searchBudget = 1 << 14

// keys is the lexicographic quality of a set, higher is better:
// init reuse, weakest-pair NVLinks, total NVLinks, -worst peer cost,
// -summed peer cost, gang affinity, device policy, -NUMA nodes spanned.
// Fragmentation of the remaining idle GPUs (frag, higher is better) and then
// the lowest positions break the remaining ties.
type keys [8]int64

func cmpKeys(a, b keys) int {
	for i := range a {
		if a[i] != b[i] {
			if a[i] > b[i] {
				return 1
			}
			return -1
		}
	}
	return 0
}

// searcher is a depth-first branch and bound over the candidate GPUs taken in
// position order. A subtree is cut when an optimistic bound of its keys is not
// better than the best set found: sets that can at most tie lose the tie to the
// earlier (lower-position) set already found.
type searcher struct {
	n                        int
	cands                    []int // positions of GPUs that fit
	bias, gain, pol          []int64
	numa                     []uint64 // NUMA node bit per candidate
	topBias, topGain, topPol []int64  // [i*(len(cands)+1)+k]: sum of the k largest from cands[i:]
	sorted                   []int64  // scratch of topSums
	sufNonFree               []int    // suffix counts of candidates that are not free
	topo, required, numaOn   bool     // link keys, TopologyRequired, NUMA key
	reqMin                   int64    // required: weakest pair must have this many NVLinks
	g                        int      // stride of nv and cost
	nv, cost                 []uint8
	rowMaxNV, rowSumNV       []int64 // per candidate, over the other candidates
	rowMinCost               []int64
	rMin, rVal, rMaxC, rCost []int64 // per remaining candidate, scratch of promising
	adj                      []uint64
	free                     uint64 // GPUs without tenants, for fragmentation

	chosen     []int // indices into cands on the current path
	best       []int // positions of the best set
	bestKey    keys
	bestFrag   int64 // -1: not computed yet (see frag)
	bestMask   uint64
	found      bool
	visits     int
	exhaustive bool // tests: no pruning, no budget
}

type partial struct {
	m                              int
	mask, numa                     uint64
	bias, gain, pol                int64
	minNV, totNV, maxCost, sumCost int64
}

// choose selects container c's GPUs among f.cands; nil when topology is
// required and no candidate set meets it.
func (f *Fitter) choose(c *Container, u []usage, init bool) []int {
	s := &f.s
	mode := f.req.topology()
	s.n, s.cands = c.Number, f.cands
	s.topo = mode != TopologyNone && c.Number > 1
	s.numaOn = s.topo
	s.required = mode == TopologyRequired && c.Number > 1
	f.ensureLinks()
	s.g, s.nv, s.cost, s.adj = len(f.node.GPUs), f.nv, f.cost, f.adj
	if s.required {
		s.reqMin = f.bestMinNV(c.Number)
	}
	s.free = 0
	for pos := range f.node.GPUs {
		if f.node.GPUs[pos].Healthy && u[pos].shares == 0 && u[pos].excl == 0 {
			s.free |= 1 << pos
		}
	}
	score := deviceScorers[f.req.policy()]
	s.bias, s.gain, s.pol, s.numa = s.bias[:0], s.gain[:0], s.pol[:0], s.numa[:0]
	for _, pos := range s.cands {
		g := &f.node.GPUs[pos]
		s.numa = append(s.numa, 1<<(uint(g.NUMA)&63))
		s.pol = append(s.pol, score(g, u[pos], c.memoryOn(g.MemoryMiB), c.Cores))
		var b int64
		if init && f.appMask&(1<<pos) != 0 {
			b = 1 // reuse a GPU the pod's app containers hold: footprint is max, not sum
		}
		s.bias = append(s.bias, b)
		s.gain = append(s.gain, f.gangGain(pos))
	}
	if s.n == 1 && !s.exhaustive {
		return s.single()
	}
	s.suffixes()
	if s.topo && !s.required && s.uniform() {
		s.topo = false // every pair alike (NVSwitch, flat PCIe): link keys tie for all sets
	}
	if s.topo {
		s.rowStats()
	}
	s.chosen = growInt(s.chosen, s.n)
	s.best, s.found, s.visits = s.best[:0], false, 0
	s.dfs(0, partial{minNV: math.MaxInt64})
	if !s.found {
		return nil
	}
	return s.best
}

// single is the search for one GPU: a scan with the same keys and tie-breaks.
func (s *searcher) single() []int {
	s.best, s.found, s.bestFrag = s.best[:0], false, -1
	best := -1
	for i, pos := range s.cands {
		k := keys{0: s.bias[i], 5: s.gain[i], 6: s.pol[i]}
		c := 1
		if best >= 0 {
			c = cmpKeys(k, s.bestKey)
		}
		if c < 0 {
			continue
		}
		fr := int64(-1)
		if c == 0 {
			if fr = fragmentation(s.free&^(1<<pos), s.adj, 0); fr <= s.frag() {
				continue
			}
		}
		best, s.bestKey, s.bestFrag, s.bestMask = i, k, fr, 1<<pos
	}
	s.best, s.found = append(s.best, s.cands[best]), true
	return s.best
}

// suffixes computes what promising bounds with: per suffix of the
// candidates, the sums of the k largest per-GPU keys and the busy count.
func (s *searcher) suffixes() {
	n := len(s.cands)
	s.topBias, s.sorted = s.topSums(s.topBias, s.bias), s.sorted[:0]
	s.topGain, s.sorted = s.topSums(s.topGain, s.gain), s.sorted[:0]
	s.topPol = s.topSums(s.topPol, s.pol)
	s.sufNonFree = growInt(s.sufNonFree, n+1)
	s.sufNonFree[n] = 0
	for i := n - 1; i >= 0; i-- {
		s.sufNonFree[i] = s.sufNonFree[i+1]
		if s.free&(1<<s.cands[i]) == 0 {
			s.sufNonFree[i]++
		}
	}
}

// topSums fills out[i*(n+1)+k] with the sum of the k largest of v[i:], by
// inserting v[i] into a descending list while walking i down: O(n²), or
// O(n) when v is constant (bias and gang keys usually are).
func (s *searcher) topSums(out, v []int64) []int64 {
	n := len(v)
	out = grow(out, n*(n+1))
	if constant(v) {
		for i := 0; i < n; i++ {
			for k := 0; k <= n-i; k++ {
				out[i*(n+1)+k] = int64(k) * v[0]
			}
		}
		return out
	}
	s.sorted = s.sorted[:0]
	for i := n - 1; i >= 0; i-- {
		s.sorted = append(s.sorted, v[i])
		for j := len(s.sorted) - 1; j > 0 && s.sorted[j-1] < s.sorted[j]; j-- {
			s.sorted[j-1], s.sorted[j] = s.sorted[j], s.sorted[j-1]
		}
		row := out[i*(n+1):]
		row[0] = 0
		for k, x := range s.sorted {
			row[k+1] = row[k] + x
		}
	}
	return out
}

func (s *searcher) dfs(start int, p partial) {
	last := len(s.cands) - (s.n - p.m)
	for i := start; i <= last; i++ {
		if !s.exhaustive && s.visits >= searchBudget {
			return
		}
		s.visits++
		s.chosen[p.m] = i
		q := s.extend(p, i)
		if s.required && q.m >= 2 && q.minNV < s.reqMin {
			continue
		}
		if q.m == s.n {
			s.leaf(q)
			continue
		}
		if s.found && !s.exhaustive && !s.promising(q, i+1) {
			continue
		}
		s.dfs(i+1, q)
	}
}

func (s *searcher) extend(p partial, i int) partial {
	pos := s.cands[i]
	q := p
	q.m++
	q.mask |= 1 << pos
	q.numa |= s.numa[i]
	q.bias += s.bias[i]
	q.gain += s.gain[i]
	q.pol += s.pol[i]
	if s.topo {
		row := pos * s.g
		for _, k := range s.chosen[:p.m] {
			o := s.cands[k]
			nv, c := int64(s.nv[row+o]), int64(s.cost[row+o])
			q.minNV = min(q.minNV, nv)
			q.totNV += nv
			q.maxCost = max(q.maxCost, c)
			q.sumCost += c
		}
	}
	return q
}

func (s *searcher) key(q partial) keys {
	k := keys{0: q.bias, 5: q.gain, 6: q.pol}
	if s.topo {
		k[1], k[2], k[3], k[4] = q.minNV, q.totNV, -q.maxCost, -q.sumCost
	}
	if s.numaOn {
		k[7] = -int64(bits.OnesCount64(q.numa))
	}
	return k
}

func (s *searcher) leaf(q partial) {
	if s.required && !connected(q.mask, s.adj) {
		return
	}
	k := s.key(q)
	c := 1
	if s.found {
		c = cmpKeys(k, s.bestKey)
	}
	if c < 0 {
		return
	}
	fr := int64(-1) // computed only to break a tie
	if c == 0 {
		if fr = fragmentation(s.free&^q.mask, s.adj, 0); fr <= s.frag() {
			return
		}
	}
	s.found, s.bestKey, s.bestFrag, s.bestMask = true, k, fr, q.mask
	s.best = s.best[:0]
	for _, i := range s.chosen[:s.n] {
		s.best = append(s.best, s.cands[i])
	}
}

// frag is the fragmentation measure of the best set, computed on first use.
func (s *searcher) frag() int64 {
	if s.bestFrag < 0 {
		s.bestFrag = fragmentation(s.free&^s.bestMask, s.adj, 0)
	}
	return s.bestFrag
}

func constant(v []int64) bool {
	for _, x := range v {
		if x != v[0] {
			return false
		}
	}
	return true
}

func grow(b []int64, n int) []int64 {
	if cap(b) < n {
		return make([]int64, n)
	}
	return b[:n]
}

func growInt(b []int, n int) []int {
	if cap(b) < n {
		return make([]int, n)
	}
	return b[:n]
}
