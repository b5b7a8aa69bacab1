package vgpu

import (
	"slices"
	"sync"
	"sync/atomic"

	schedapi "volcano.sh/volcano/pkg/scheduler/api"

	"github.com/volcano-vgpu/volcano-vgpu/plugins/placement"
)

// Within a session Volcano asks the same question many times: the predicate
// of every pending task on every node, the score of the nodes that pass, and
// Fit again in the allocate event; and most tasks of a busy cluster share a
// few request shapes. Fit is deterministic for one request shape, one node
// state and one set of sibling GPUs on the node, so its answer is kept per
// node until the node's bookings change.

// fitKey identifies Fit calls with the same answer on one state of a node.
// It is looked up for every (task, node) a session tries, so the request's
// shape is a small number (fitShapeKey interned once per task and session)
// rather than the key's text.
type fitKey struct {
	shape int32          // the session's number for fitShapeKey of the request
	job   schedapi.JobID // the job, only when its placed siblings hold GPUs on the node (they steer the choice)
}

// fitEntry is one Fit answer, shared read-only by every caller; the score
// (of a task without a gang) is filled in under the node's lock.
type fitEntry struct {
	pl      placement.Placement // own copy; empty when refused
	reasons []placement.Reason  // own copy; nil when the request fits
	version uint64              // the node's version it answers for

	scored bool
	policy placement.Policy
	score  float64
}

// nodeFits is one GPU node's memo, with the node's state, so that a
// predicate or score finds both with one lookup by name. Predicates of
// different nodes run in parallel and take only their node's lock.
type nodeFits struct {
	node    *placement.Node
	idx     int           // the node's slot in every shapeMemo of the session
	version atomic.Uint64 // bumped by every booking change on the node (under mu)
	mu      sync.Mutex
	entries map[fitKey]*fitEntry // answers steered by the job's siblings on the node
}

func newNodeFits(n *placement.Node, idx int) *nodeFits {
	return &nodeFits{node: n, idx: idx, entries: map[fitKey]*fitEntry{}}
}

// shapeMemo holds one request shape's answers, one slot per GPU node of
// the session (nodeFits.idx); a slot's answer counts while its version is
// the node's. The slots are made on the shape's first Fit: a task tried on
// nodes visits a share of them anyway, one parsed only costs nothing.
type shapeMemo struct {
	nodes int
	once  sync.Once
	slots []atomic.Pointer[fitEntry]
}

func (m *shapeMemo) slot(idx int) *atomic.Pointer[fitEntry] {
	m.once.Do(func() { m.slots = make([]atomic.Pointer[fitEntry], m.nodes) })
	if idx >= len(m.slots) {
		return nil
	}
	return &m.slots[idx]
}

// fit is Fit of the task's request on nf's node with gang (may be nil), from
// the memo when the node has not changed since it was asked.
func (p *plugin) fit(r requestResult, job schedapi.JobID, nf *nodeFits, gang *placement.GangView) *fitEntry {
	n := nf.node
	if gang != nil && len(gang.Placed[n.Name].GPUs) > 0 {
		return p.fitSteered(r, fitKey{shape: r.fitShape, job: job}, nf, gang)
	}
	var slot *atomic.Pointer[fitEntry]
	if r.memo != nil {
		slot = r.memo.slot(nf.idx)
	}
	if slot == nil {
		return p.fitNow(r, nf, gang, nf.version.Load())
	}
	version := nf.version.Load()
	if e := slot.Load(); e != nil && e.version == version {
		return e
	}
	e := p.fitNow(r, nf, gang, version)
	if nf.version.Load() == version { // else a booking changed the node meanwhile
		slot.Store(e)
	}
	return e
}

// fitSteered is fit for a task whose placed siblings hold GPUs on the node:
// the answer depends on the job, so it is kept by shape and job.
func (p *plugin) fitSteered(r requestResult, key fitKey, nf *nodeFits, gang *placement.GangView) *fitEntry {
	nf.mu.Lock()
	e, ok := nf.entries[key]
	version := nf.version.Load()
	nf.mu.Unlock()
	if ok {
		return e
	}
	e = p.fitNow(r, nf, gang, version)
	nf.mu.Lock()
	if nf.version.Load() == version { // no booking changed the node meanwhile
		nf.entries[key] = e
	}
	nf.mu.Unlock()
	return e
}

// fitNow computes the answer for the node at version.
func (p *plugin) fitNow(r requestResult, nf *nodeFits, gang *placement.GangView, version uint64) *fitEntry {
	f := p.fitter()
	defer p.fitters.Put(f)
	pl, reasons := f.Fit(r.req, nf.node, gang)
	e := &fitEntry{version: version}
	if len(reasons) > 0 {
		e.reasons = slices.Clone(reasons)
	} else {
		e.pl = pl.Clone()
	}
	return e
}

// scoreOf is ScoreNode of e's placement, memoized for a task without a gang
// (a gang's score depends on its siblings everywhere, not only on this node).
func (p *plugin) scoreOf(r requestResult, nf *nodeFits, e *fitEntry, gang *placement.GangView) float64 {
	n := nf.node
	if gang != nil {
		f := p.fitter()
		defer p.fitters.Put(f)
		return f.ScoreNode(r.req, n, e.pl, gang, r.nodePolicy)
	}
	nf.mu.Lock()
	if e.scored && e.policy == r.nodePolicy {
		s := e.score
		nf.mu.Unlock()
		return s
	}
	nf.mu.Unlock()
	f := p.fitter()
	s := f.ScoreNode(r.req, n, e.pl, nil, r.nodePolicy)
	p.fitters.Put(f)
	nf.mu.Lock()
	e.scored, e.policy, e.score = true, r.nodePolicy, s
	nf.mu.Unlock()
	return s
}

// shapeID numbers a fitShapeKey for this session's memo keys and returns
// the shape's memo, one slot per GPU node.
func (p *plugin) shapeID(key string) (int32, *shapeMemo) {
	p.shapeMu.Lock()
	defer p.shapeMu.Unlock()
	if p.shapes == nil {
		p.shapes = map[string]shapeNumber{}
	}
	s, ok := p.shapes[key]
	if !ok {
		s = shapeNumber{id: int32(len(p.shapes)), memo: &shapeMemo{nodes: len(p.fits)}}
		p.shapes[key] = s
	}
	return s.id, s.memo
}

// shapeNumber is a request shape's number and memo in this session.
type shapeNumber struct {
	id   int32
	memo *shapeMemo
}

// touched forgets the node's memo: its bookings changed.
func (p *plugin) touched(node string) {
	nf, ok := p.fits[node]
	if !ok {
		return
	}
	nf.mu.Lock()
	nf.version.Add(1)
	clear(nf.entries)
	nf.mu.Unlock()
}
