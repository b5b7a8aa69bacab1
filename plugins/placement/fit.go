package placement

import "github.com/volcano-vgpu/volcano-vgpu/api"

// usage is the part of a GPU that placing a pod changes.
type usage struct {
	mem    int64
	cores  int
	shares int
	excl   int
}

// add books one container's share of a GPU.
func (u *usage) add(mem int64, cores int) {
	u.mem += mem
	u.cores += cores
	u.shares++
	if cores >= 100 {
		u.excl++
	}
}

// Fitter is the reusable scratch space of Fit and ScoreNode: with one Fitter
// per goroutine, steady-state calls do not allocate. A Fitter is not safe for
// concurrent use (Volcano predicates nodes in parallel: keep Fitters in a
// sync.Pool). Its zero value is ready.
//
// The Placement and the reasons a Fitter returns borrow the Fitter's buffers
// and are valid until its next call: Placement.Clone (or copy the reasons) to
// keep them.
type Fitter struct {
	node *Node
	req  *Request

	base, view []usage // node usage before the pod; and with the pod's app containers and sidecars added
	side       []usage // base plus the sidecars declared so far (for classic init containers)
	appMask    uint64  // GPUs the pod's app containers hold

	sib    [MaxGPUs]int32 // sibling tasks of the same job per GPU
	hasSib bool

	linksOK bool // nv, cost, adj, maxNV describe node (see Links)
	nv      []uint8
	cost    []uint8
	adj     []uint64
	maxNV   int64
	ownNV   []uint8 // storage for nodes without a link matrix
	ownCost []uint8
	ownAdj  [MaxGPUs]uint64

	cands   []int
	s       searcher
	conts   []ContainerPlacement
	devs    []Device
	reasons []Reason

	sim     *Fitter // for ScoreNode's simulation of pending siblings
	scratch Node

	held  []migUse // MIG asks: what bookings hold per GPU, the pod's own included
	profs []int    // MIG asks: profile indexes of one GPU
}

// Fit places req on node: for every container the GPUs, memory and cores it
// gets. gang (may be nil) steers device choice toward (binpack) or away from
// (spread) the GPUs of already-placed tasks of the same job. On failure the
// Placement is empty and the reasons say why (see Reason).
func Fit(req *Request, node *Node, gang *GangView) (Placement, []Reason) {
	var f Fitter
	return f.Fit(req, node, gang)
}

// Fit is the package-level Fit on f's scratch space.
func (f *Fitter) Fit(req *Request, node *Node, gang *GangView) (Placement, []Reason) {
	f.reasons = f.reasons[:0]
	if err := req.validate(); err != nil {
		return Placement{}, append(f.reasons, Reason{Code: CodeInvalidRequest, Detail: err.Error()})
	}
	total := 0
	for i := range req.Containers {
		total += req.Containers[i].Number
	}
	f.conts = f.conts[:0]
	for i := range req.Containers {
		f.conts = append(f.conts, ContainerPlacement{Name: req.Containers[i].Name, Init: req.Containers[i].Init, Restartable: req.Containers[i].Restartable})
	}
	if total == 0 {
		return Placement{Node: node.Name, Containers: f.conts}, nil
	}
	switch {
	case node.Stale:
		return Placement{}, append(f.reasons, Reason{Code: CodeStale})
	case len(node.GPUs) == 0:
		return Placement{}, append(f.reasons, Reason{Code: CodeNoGPUs})
	case len(node.GPUs) > MaxGPUs:
		return Placement{}, append(f.reasons, Reason{Code: CodeTooManyGPUs, Have: int64(len(node.GPUs))})
	}
	f.prepare(req, node, gang)
	if cap(f.devs) < total {
		f.devs = make([]Device, 0, total)
	}
	f.devs = f.devs[:0]
	if req.Mode == api.ModeMIG {
		return f.fitMIG(req, node)
	}
	// App containers and sidecars run together: each sees the ones before it (view).
	for i := range req.Containers {
		if c := &req.Containers[i]; c.beside() && c.Number > 0 && !f.place(i, f.view, false) {
			return Placement{}, f.reasons
		}
	}
	// Classic init containers run one at a time before the app containers, so
	// each has to fit next to other pods and the sidecars declared before it
	// (side), never next to the rest of its own pod.
	f.side = append(f.side[:0], f.base...)
	for i := range req.Containers {
		c := &req.Containers[i]
		switch {
		case !c.Init || c.Number == 0:
		case c.Restartable:
			for _, d := range f.conts[i].Devices {
				f.side[d.Pos].add(d.MemoryMiB, d.Cores)
			}
		case !f.place(i, f.side, true):
			return Placement{}, f.reasons
		}
	}
	return Placement{Node: node.Name, Containers: f.conts}, nil
}

func (f *Fitter) prepare(req *Request, node *Node, gang *GangView) {
	f.node, f.req, f.linksOK, f.appMask, f.hasSib = node, req, false, 0, false
	f.base, f.view = f.base[:0], f.view[:0]
	for i := range node.GPUs {
		g := &node.GPUs[i]
		u := gpuUsage(g)
		f.base, f.view = append(f.base, u), append(f.view, u)
	}
	clear(f.sib[:len(node.GPUs)])
	if gang == nil {
		return
	}
	for _, uuid := range gang.Placed[node.Name].GPUs {
		if pos := node.pos(uuid, -1); pos >= 0 {
			f.sib[pos]++
			f.hasSib = true
		}
	}
}

// check is the per-GPU predicate for container c against usage u.
func (f *Fitter) check(pos int, c *Container, u *usage) Code {
	g := &f.node.GPUs[pos]
	if !g.Healthy {
		return CodeUnhealthy
	}
	if code := f.req.admits(g); code != CodeOK {
		return code
	}
	switch {
	case c.Number > 1 && g.mode() == api.ModeMPS:
		return CodeMPSOneGPU
	case f.req.SpreadGroup && f.sib[pos] > 0:
		return CodeGroupShared
	case u.excl > 0:
		return CodeExclusiveHeld
	case u.shares >= g.ShareLimit():
		return CodeSharesFull
	case c.exclusive() && u.shares > 0:
		return CodeShared
	case g.MemoryMiB-u.mem < c.memoryOn(g.MemoryMiB):
		return CodeMemory
	case c.Cores > 100-u.cores || (c.Cores == 0 && u.cores >= 100):
		return CodeCores
	}
	return CodeOK
}

// place chooses GPUs for container ci on usage u; app containers also book
// them in u.
func (f *Fitter) place(ci int, u []usage, init bool) bool {
	c := &f.req.Containers[ci]
	f.cands = f.cands[:0]
	for pos := range f.node.GPUs {
		if f.check(pos, c, &u[pos]) == CodeOK {
			f.cands = append(f.cands, pos)
		}
	}
	if len(f.cands) < c.Number {
		f.explain(c, u)
		return false
	}
	set := f.choose(c, u, init)
	if set == nil {
		f.reasons = append(f.reasons, Reason{Code: CodeTopology, Container: c.Name, Want: int64(c.Number), Count: c.Number})
		return false
	}
	start := len(f.devs)
	for _, pos := range set {
		g := &f.node.GPUs[pos]
		mem := c.memoryOn(g.MemoryMiB)
		f.devs = append(f.devs, Device{Pos: pos, UUID: g.UUID, MemoryMiB: mem, Cores: c.Cores})
		if init {
			continue
		}
		u[pos].add(mem, c.Cores)
		f.appMask |= 1 << pos
	}
	f.conts[ci].Devices = f.devs[start:len(f.devs):len(f.devs)]
	return true
}

// explain records why container c does not fit: a reason per GPU, then the
// node-level summaries.
func (f *Fitter) explain(c *Container, u []usage) {
	var inMode, outsideMIG, matching, usable, fitting, nExcl, nShared, nFull, nGroup, nMPS int
	memBest, coreBest := -1, -1
	for pos := range f.node.GPUs {
		g := &f.node.GPUs[pos]
		if g.mode() == f.req.Mode {
			inMode++
		}
		if g.mode() != api.ModeMIG {
			outsideMIG++
		}
		if f.req.admits(g) == CodeOK {
			matching++
			if g.Healthy {
				usable++
			}
		}
		code := f.check(pos, c, &u[pos])
		if code == CodeOK {
			fitting++
			continue
		}
		r := Reason{Code: code, Container: c.Name, GPU: g.UUID, Model: g.Model}
		switch code {
		case CodeModeMismatch:
			r.Mode = g.mode()
		case CodeMPSOneGPU:
			r.Want = int64(c.Number)
			nMPS++
		case CodeGroupShared:
			nGroup++
		case CodeExclusiveHeld:
			nExcl++
		case CodeSharesFull:
			r.Have, r.Want = int64(u[pos].shares), int64(g.ShareLimit())
			nFull++
		case CodeShared:
			r.Have = int64(u[pos].shares)
			nShared++
		case CodeMemory:
			r.Want, r.Have, r.Percent = c.memoryOn(g.MemoryMiB), g.MemoryMiB-u[pos].mem, c.MemoryPercent
			if memBest < 0 || r.Have > f.node.GPUs[memBest].MemoryMiB-u[memBest].mem {
				memBest = pos
			}
		case CodeCores:
			r.Want, r.Have = int64(c.Cores), int64(100-u[pos].cores)
			if coreBest < 0 || u[pos].cores < u[coreBest].cores {
				coreBest = pos
			}
		}
		f.reasons = append(f.reasons, r)
	}
	n := c.Number
	node := Reason{Container: c.Name, Count: n, Want: int64(n)}
	// Too few GPUs pass the filters, healthy or not; else too few of those
	// are healthy ("needs 2 GPUs, 2 match the filters but 1 is healthy").
	switch {
	case f.req.Mode != "" && inMode < n:
		node.Code, node.Have, node.Mode = CodeTooFewInMode, int64(inMode), f.req.Mode
		f.reasons = append(f.reasons, node)
		return
	case f.req.Mode == "" && outsideMIG < n && outsideMIG < len(f.node.GPUs):
		node.Code, node.Have = CodeMIGOnly, int64(outsideMIG)
		f.reasons = append(f.reasons, node)
		return
	case f.req.filtered() && matching < n:
		node.Code, node.Have, node.Detail = CodeTooFewMatching, int64(matching), f.req.filterText()
		f.reasons = append(f.reasons, node)
		return
	case usable < n:
		node.Code, node.Have = CodeTooFewHealthy, int64(usable)
		if f.req.filtered() {
			node.Match = int64(matching)
		}
		f.reasons = append(f.reasons, node)
		return
	}
	if n > 1 && fitting > 0 {
		node.Code, node.Have = CodeTooFewFit, int64(fitting)
		f.reasons = append(f.reasons, node)
	}
	if memBest >= 0 {
		g := &f.node.GPUs[memBest]
		f.reasons = append(f.reasons, Reason{Code: CodeMemory, Container: c.Name, Model: g.Model, Best: g.UUID,
			Want: c.memoryOn(g.MemoryMiB), Have: g.MemoryMiB - u[memBest].mem, Count: n, Percent: c.MemoryPercent})
	}
	if coreBest >= 0 {
		g := &f.node.GPUs[coreBest]
		f.reasons = append(f.reasons, Reason{Code: CodeCores, Container: c.Name, Model: g.Model, Best: g.UUID,
			Want: int64(c.Cores), Have: int64(100 - u[coreBest].cores), Count: n})
	}
	for _, k := range [...]struct {
		code Code
		n    int
	}{{CodeGroupShared, nGroup}, {CodeShared, nShared}, {CodeExclusiveHeld, nExcl}, {CodeSharesFull, nFull}, {CodeMPSOneGPU, nMPS}} {
		if k.n > 0 {
			f.reasons = append(f.reasons, Reason{Code: k.code, Container: c.Name, Have: int64(k.n), Count: n})
		}
	}
}

// pos finds a GPU by UUID, trying hint first.
func (n *Node) pos(uuid string, hint int) int {
	if hint >= 0 && hint < len(n.GPUs) && n.GPUs[hint].UUID == uuid {
		return hint
	}
	for i := range n.GPUs {
		if n.GPUs[i].UUID == uuid {
			return i
		}
	}
	return -1
}
