package placement

import "math/bits"

// MaxScore is the top of the score range, Volcano's framework.MaxNodeScore.
// Weights are applied by the caller.
const MaxScore = 100

// maxSimulated caps how many pending sibling tasks ScoreNode simulates on one
// node (the single-shape, one-GPU case is counted exactly without simulating).
const maxSimulated = 32

// GangView is what scoring knows about the other tasks of the job (Volcano
// job / PodGroup) the task being placed belongs to.
type GangView struct {
	Placed      map[string]Siblings // node name -> tasks of the job already placed there
	PlacedTasks int                 // tasks already placed, all nodes
	Pending     []Pending           // tasks still to place after this one, by shape
}

// Siblings are the already-placed tasks of the job on one node.
type Siblings struct {
	Tasks int
	GPUs  []string // UUIDs they hold, one entry per task and GPU
}

// Pending is Count more tasks shaped like Request.
type Pending struct {
	Request *Request
	Count   int
}

func (g *GangView) pending() int {
	if g == nil {
		return 0
	}
	n := 0
	for _, p := range g.Pending {
		if p.Request != nil {
			n += max(p.Count, 0)
		}
	}
	return n
}

// deviceScoreFn rates one GPU for an ask of mem MiB and cores percent given
// its usage u; higher wins. Integer so that ties are exact.
type deviceScoreFn func(g *GPU, u usage, mem int64, cores int) int64

var deviceScorers = map[Policy]deviceScoreFn{Binpack: binpackGPU, Spread: spreadGPU}

// gpuUtil is the GPU's utilisation after the ask in basis points (0..10000):
// the mean of its memory and cores fractions.
func gpuUtil(g *GPU, u usage, mem int64, cores int) int64 {
	m := int64(10000)
	if g.MemoryMiB > 0 {
		m = min(max((u.mem+mem)*10000/g.MemoryMiB, 0), 10000)
	}
	c := min(max(int64(u.cores+cores)*100, 0), 10000)
	return (m + c) / 2
}

// binpackGPU prefers the GPU on which the ask strands the least memory (see
// strandedMiB), then the fullest that fits.
func binpackGPU(g *GPU, u usage, mem int64, cores int) int64 {
	return -strandsMiB(g, u, mem, cores)*10001 + gpuUtil(g, u, mem, cores)
}

// spreadGPU prefers the emptiest GPU, then the one with fewer tenants.
func spreadGPU(g *GPU, u usage, mem int64, cores int) int64 {
	return (10000-gpuUtil(g, u, mem, cores))*64 - int64(min(u.shares, 63))
}

// nodeScore is the input of a node scorer.
type nodeScore struct {
	util     float64 // node utilisation after the placement, 0..1
	siblings int     // job tasks already on this node
	placed   int     // job tasks already placed anywhere
	total    int     // job tasks: placed + this one + pending
	colocate int     // tasks of the job on this node if it is chosen: siblings + 1 + pending that still fit
	island   float64 // share of the placement's GPUs in an NVLink island with sibling GPUs
	whole    bool    // the ask takes whole GPUs (see Request.wholeGPUs)
	large    float64 // whole: how large the placement's GPUs are, 0..1 (see largeGPUs)
}

type nodeScoreFn func(s nodeScore) float64

var nodeScorers = map[Policy]nodeScoreFn{Binpack: binpackNode, Spread: spreadNode}

// binpackNode keeps the job together, then fills nodes. The count of the
// job's tasks that end up on the node dominates; utilisation (and NVLink
// closeness to siblings) only orders nodes that keep the same number together:
//
//	score = 100 * ((colocate-1) + tie) / total,  tie in [0,1]
//
// Without a gang (total = 1) this is 100 * utilisation. An ask for whole GPUs
// weighs the size of the GPUs it would take as much as utilisation: whole GPUs
// use all of a GPU's memory wherever they go, while shared GPUs strand more of
// it the larger they are (see strandedMiB), so the largest GPUs go whole and
// the smaller ones stay free for fractions.
func binpackNode(s nodeScore) float64 {
	tie := s.util
	if s.siblings > 0 {
		tie = 0.75*s.util + 0.25*s.island
	}
	if s.whole {
		tie = (tie + s.large) / 2
	}
	return MaxScore * (float64(s.colocate-1) + tie) / float64(max(s.total, 1))
}

// spreadNode keeps siblings apart, then prefers the emptiest node:
//
//	score = 100 * ((placed-siblings) + (1-util)) / (placed+1)
func spreadNode(s nodeScore) float64 {
	return MaxScore * (float64(s.placed-s.siblings) + 1 - s.util) / float64(s.placed+1)
}

// strandSplit splits the binpack score range: placements that strand no
// memory score in [strandSplit, MaxScore], the others below (see strandBand).
const strandSplit = MaxScore / 2

// strandScaleMiB is the stranded memory that costs half of strandBand's lower
// band: the penalty grows with every MiB and saturates toward the band's floor.
const strandScaleMiB = 16 << 10

// strandBand ranks a binpack score v (0..MaxScore) by the memory the
// placement strands (see strandedMiB): placements that strand none keep v in
// [strandSplit, MaxScore]; those that strand some score below it, the more
// stranded MiB the lower, v only breaking near-ties. So under binpack a
// fraction goes where its memory stays usable first, and only then to the
// fullest node; whole GPUs strand nothing.
func strandBand(v float64, strandsMiB int64) float64 {
	if strandsMiB <= 0 {
		return strandSplit + v*(MaxScore-strandSplit)/MaxScore
	}
	keep := float64(strandScaleMiB) / float64(strandsMiB+strandScaleMiB) // (0,1): 1/2 at strandScaleMiB
	return (strandSplit - 1) * (0.99*keep + 0.01*v/MaxScore)
}

// linkBand splits the score range for requests with multi-GPU containers: a
// placement whose sets are as well linked as the node's topology allows scores
// in [linkBand, MaxScore], one that settles for weaker links below linkBand,
// so no utilisation or gang-affinity gain outweighs link quality.
const linkBand = MaxScore / 2

// ScoreNode rates node for req placed as p (from Fit on that node) under the
// node-level policy, in 0..MaxScore. gang may be nil. An unknown policy scores 0.
// Link quality comes first for multi-GPU containers (see linkBand).
func ScoreNode(req *Request, node *Node, p Placement, gang *GangView, policy Policy) float64 {
	var f Fitter
	return f.ScoreNode(req, node, p, gang, policy)
}

// ScoreNode is the package-level ScoreNode on f's scratch space. p may be the
// Placement f itself returned from Fit.
func (f *Fitter) ScoreNode(req *Request, node *Node, p Placement, gang *GangView, policy Policy) float64 {
	score, ok := nodeScorers[policy]
	if !ok || len(node.GPUs) > MaxGPUs {
		return 0
	}
	after := &f.scratch
	after.Name, after.Links, after.Stale = node.Name, node.Links, false
	after.GPUs = append(after.GPUs[:0], node.GPUs...)
	if Apply(after, p) != nil {
		return 0
	}
	s := nodeScore{util: utilisation(after), total: 1, colocate: 1}
	if policy == Binpack && req.wholeGPUs() {
		s.whole, s.large = true, largeGPUs(node, &p)
	}
	if gang != nil {
		sib := gang.Placed[node.Name]
		s.siblings, s.placed = sib.Tasks, gang.PlacedTasks
		s.total = gang.PlacedTasks + 1 + gang.pending()
		s.colocate = sib.Tasks + 1
		if policy == Binpack {
			s.colocate += f.pendingFits(after, gang)
			if sib.Tasks > 0 {
				s.island = f.island(node, &p, sib.GPUs)
			}
		}
		s.colocate = min(s.colocate, s.total)
	}
	v := min(max(score(s), 0), MaxScore)
	if policy == Binpack {
		v = strandBand(v, placementStrandsMiB(node, after, &p))
	}
	switch f.linkQuality(req, node, &p) {
	case linksBest:
		return linkBand + v*(MaxScore-linkBand)/MaxScore
	case linksShort:
		return v * (linkBand - 1) / MaxScore
	}
	return v
}

// linkGrade says how a placement's multi-GPU sets compare with the best the
// node's topology offers for their size.
type linkGrade int

const (
	linksIrrelevant linkGrade = iota // no multi-GPU container that cares about links
	linksBest                        // every set's weakest pair is as strong as the topology allows
	linksShort                       // some set settles for weaker links than the node could give
)

// linkQuality grades p's sets on node: each multi-GPU container's weakest-pair
// NVLink count against the best any set of that size of the node's healthy,
// matching GPUs can have, whatever their usage.
func (f *Fitter) linkQuality(req *Request, node *Node, p *Placement) linkGrade {
	if req.topology() == TopologyNone {
		return linksIrrelevant
	}
	grade := linksIrrelevant
	for _, cp := range p.Containers {
		n := len(cp.Devices)
		if n < 2 {
			continue
		}
		f.node, f.req, f.linksOK = node, req, false
		f.ensureLinks()
		g := len(node.GPUs)
		weakest := int64(-1)
		for i := 0; i < n; i++ {
			a := node.pos(cp.Devices[i].UUID, cp.Devices[i].Pos)
			for j := i + 1; j < n; j++ {
				b := node.pos(cp.Devices[j].UUID, cp.Devices[j].Pos)
				if a < 0 || b < 0 {
					return linksShort
				}
				if v := int64(f.nv[a*g+b]); weakest < 0 || v < weakest {
					weakest = v
				}
			}
		}
		if weakest < f.bestMinNV(n) {
			return linksShort
		}
		grade = linksBest
	}
	return grade
}

// utilisation is the mean of the node's memory and cores fractions over its
// healthy GPUs.
func utilisation(n *Node) float64 {
	var mem, memCap, cores, coreCap float64
	for i := range n.GPUs {
		g := &n.GPUs[i]
		if !g.Healthy {
			continue
		}
		mem += float64(g.UsedMemoryMiB)
		memCap += float64(g.MemoryMiB)
		cores += float64(g.UsedCores)
		coreCap += 100
	}
	if memCap <= 0 || coreCap <= 0 {
		return 1
	}
	return min(max((mem/memCap+cores/coreCap)/2, 0), 1)
}

// island is the share of p's GPUs that hold a sibling or are NVLink-reachable
// from one.
func (f *Fitter) island(node *Node, p *Placement, sibGPUs []string) float64 {
	f.node, f.linksOK = node, false
	f.ensureLinks()
	var sibs, mine uint64
	for _, u := range sibGPUs {
		if pos := node.pos(u, -1); pos >= 0 {
			sibs |= 1 << pos
		}
	}
	for _, cp := range p.Containers {
		for _, d := range cp.Devices {
			if pos := node.pos(d.UUID, d.Pos); pos >= 0 {
				mine |= 1 << pos
			}
		}
	}
	if mine == 0 || sibs == 0 {
		return 0
	}
	all := uint64(1)<<len(node.GPUs) - 1
	if len(node.GPUs) == MaxGPUs {
		all = ^uint64(0)
	}
	reach := island(sibs, all, f.adj)
	return float64(bits.OnesCount64(mine&reach)) / float64(bits.OnesCount64(mine))
}

// pendingFits counts how many of the job's pending tasks would still fit on
// the node after this placement (after already holds it). It simulates Fit
// and Apply on after, which it consumes.
func (f *Fitter) pendingFits(after *Node, gang *GangView) int {
	want := gang.pending()
	if want == 0 {
		return 0
	}
	if len(gang.Pending) == 1 && gang.Pending[0].Request != nil {
		if n, ok := slots(gang.Pending[0].Request, after); ok {
			return min(n, want)
		}
	}
	if f.sim == nil {
		f.sim = &Fitter{}
	}
	fitted := 0
	for _, pt := range gang.Pending {
		if pt.Request == nil {
			continue
		}
		for k := 0; k < pt.Count && fitted < min(want, maxSimulated); k++ {
			p, reasons := f.sim.Fit(pt.Request, after, nil)
			// A sibling that would settle for weaker links here than the
			// node's topology allows is not counted as kept together.
			if len(reasons) > 0 || f.sim.linkQuality(pt.Request, after, &p) == linksShort || Apply(after, p) != nil {
				break
			}
			fitted++
		}
	}
	return fitted
}

// slots counts exactly how many tasks of req fit on node when req is a single
// container on one GPU (each GPU then takes tasks independently).
func slots(req *Request, node *Node) (int, bool) {
	if len(req.Containers) != 1 || req.Containers[0].Number != 1 || req.Containers[0].Init || req.validate() != nil {
		return 0, false
	}
	c := &req.Containers[0]
	total := 0
	for i := range node.GPUs {
		g := &node.GPUs[i]
		if !g.Healthy || req.admits(g) != CodeOK || g.Exclusive > 0 {
			continue
		}
		n := g.ShareLimit() - g.Shares
		if c.exclusive() || req.SpreadGroup { // the tasks of a spread group keep apart too
			n = min(n, 1)
		}
		if c.exclusive() && g.Shares > 0 {
			n = 0
		}
		if mem := c.memoryOn(g.MemoryMiB); mem > 0 {
			n = min(n, int(max(g.FreeMemoryMiB(), 0)/mem))
		}
		if c.Cores > 0 {
			n = min(n, max(100-g.UsedCores, 0)/c.Cores)
		} else if g.UsedCores >= 100 {
			n = 0
		}
		total += max(n, 0)
	}
	return total, true
}
