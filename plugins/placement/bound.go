package placement

import (
	"math/bits"
	"slices"
)

// uniform reports whether all candidate pairs have the same NVLinks and peer
// cost (NVSwitch, flat PCIe): then every set ties on the link keys.
func (s *searcher) uniform() bool {
	first := s.cands[0]*s.g + s.cands[1]
	for i, a := range s.cands {
		for _, b := range s.cands[i+1:] {
			if s.nv[a*s.g+b] != s.nv[first] || s.cost[a*s.g+b] != s.cost[first] {
				return false
			}
		}
	}
	return true
}

// rowStats computes, for every candidate, its strongest and summed NVLinks
// and its lowest peer cost to the other candidates.
func (s *searcher) rowStats() {
	n := len(s.cands)
	s.rowMaxNV, s.rowSumNV, s.rowMinCost = grow(s.rowMaxNV, n), grow(s.rowSumNV, n), grow(s.rowMinCost, n)
	for i, a := range s.cands {
		var mx, sum int64
		mn := PCIeUnknown.cost()
		for j, b := range s.cands {
			if i == j {
				continue
			}
			nv := int64(s.nv[a*s.g+b])
			mx, sum, mn = max(mx, nv), sum+nv, min(mn, int64(s.cost[a*s.g+b]))
		}
		s.rowMaxNV[i], s.rowSumNV[i], s.rowMinCost[i] = mx, sum, mn
	}
}

// promising reports whether some completion of q (q.m >= 1), adding k more
// members from cands[next:], could beat the best set. Each key's optimistic
// bound is computed only when the keys before it tie with the best set; a
// completion that can at most tie loses to the earlier best.
func (s *searcher) promising(q partial, next int) bool {
	k := s.n - q.m
	top := next*(len(s.cands)+1) + k // the k best of cands[next:]
	if b := q.bias + s.topBias[top]; b != s.bestKey[0] {
		return b > s.bestKey[0]
	}
	if s.topo {
		s.scanRest(q, next, int64(k))
		// The weakest pair is at most the k-th best weakest link of a newcomer to q.
		b := kthLargest(s.rMin, k)
		if q.m >= 2 {
			b = min(b, q.minNV)
		}
		if b != s.bestKey[1] {
			return b > s.bestKey[1]
		}
		// Twice the NVLinks added: each newcomer's links to q counted twice,
		// plus its links to other newcomers (each such pair counted from both ends).
		if b := q.totNV + sumLargest(s.rVal, k)/2; b != s.bestKey[2] {
			return b > s.bestKey[2]
		}
		if b := -max(q.maxCost, kthSmallest(s.rMaxC, k)); b != s.bestKey[3] {
			return b > s.bestKey[3]
		}
		if b := -(q.sumCost + (sumSmallest(s.rCost, k)+1)/2); b != s.bestKey[4] {
			return b > s.bestKey[4]
		}
	}
	if b := q.gain + s.topGain[top]; b != s.bestKey[5] {
		return b > s.bestKey[5]
	}
	if b := q.pol + s.topPol[top]; b != s.bestKey[6] {
		return b > s.bestKey[6]
	}
	if s.numaOn {
		if b := -int64(bits.OnesCount64(q.numa)); b != s.bestKey[7] {
			return b > s.bestKey[7]
		}
	}
	// Each further member that is an idle GPU removes a vertex from the idle
	// islands; at least k minus the busy candidates left will be idle.
	return fragmentation(s.free&^q.mask, s.adj, k-s.sufNonFree[next]) > s.frag()
}

// scanRest fills, for each candidate c after next: its weakest link to q
// (rMin), twice its NVLinks to q plus an upper bound of its NVLinks to k-1
// other newcomers (rVal), its worst PCIe level to q (rMaxC), and twice its
// PCIe levels to q plus a lower bound of those to k-1 other newcomers (rCost).
func (s *searcher) scanRest(q partial, next int, k int64) {
	r := len(s.cands) - next
	s.rMin, s.rVal, s.rMaxC, s.rCost = grow(s.rMin, r), grow(s.rVal, r), grow(s.rMaxC, r), grow(s.rCost, r)
	rMin, rVal, rMaxC, rCost := s.rMin[:r], s.rVal[:r], s.rMaxC[:r], s.rCost[:r]
	for x := range r {
		i := next + x
		row := s.cands[i] * s.g
		mn, nvSum, mc, cSum := int64(1<<62), int64(0), int64(0), int64(0)
		for _, j := range s.chosen[:q.m] {
			o := s.cands[j]
			nv, c := int64(s.nv[row+o]), int64(s.cost[row+o])
			mn, nvSum, mc, cSum = min(mn, nv), nvSum+nv, max(mc, c), cSum+c
		}
		rMin[x] = mn
		rVal[x] = 2*nvSum + min((k-1)*s.rowMaxNV[i], s.rowSumNV[i]-nvSum)
		rMaxC[x] = mc
		rCost[x] = 2*cSum + (k-1)*s.rowMinCost[i]
	}
}

// The selections below sort their scratch argument in place (k <= len(v)).

func kthLargest(v []int64, k int) int64 {
	slices.Sort(v)
	return v[len(v)-k]
}

func kthSmallest(v []int64, k int) int64 {
	slices.Sort(v)
	return v[k-1]
}

func sumLargest(v []int64, k int) int64 {
	slices.Sort(v)
	var sum int64
	for _, x := range v[len(v)-k:] {
		sum += x
	}
	return sum
}

func sumSmallest(v []int64, k int) int64 {
	slices.Sort(v)
	var sum int64
	for _, x := range v[:k] {
		sum += x
	}
	return sum
}
