package vgpu

import (
	"slices"
	"sync"

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

	scored bool
	policy placement.Policy
	score  float64
}

// nodeFits is one GPU node's memo, with the node's state, so that a
// predicate or score finds both with one lookup by name. Predicates of
// different nodes run in parallel and take only their node's lock.
type nodeFits struct {
	node    *placement.Node
	mu      sync.Mutex
	version uint64 // bumped by every booking change on the node
	entries map[fitKey]*fitEntry
}

func newNodeFits(n *placement.Node) *nodeFits {
	return &nodeFits{node: n, entries: map[fitKey]*fitEntry{}}
}

// fit is Fit of the task's request on nf's node with gang (may be nil), from
// the memo when the node has not changed since it was asked.
func (p *plugin) fit(r requestResult, job schedapi.JobID, nf *nodeFits, gang *placement.GangView) *fitEntry {
	n := nf.node
	key := fitKey{shape: r.fitShape}
	if gang != nil && len(gang.Placed[n.Name].GPUs) > 0 {
		key.job = job
	}
	nf.mu.Lock()
	e, ok := nf.entries[key]
	version := nf.version
	nf.mu.Unlock()
	if ok {
		return e
	}
	f := p.fitter()
	pl, reasons := f.Fit(r.req, n, gang)
	e = &fitEntry{}
	if len(reasons) > 0 {
		e.reasons = slices.Clone(reasons)
	} else {
		e.pl = pl.Clone()
	}
	p.fitters.Put(f)
	nf.mu.Lock()
	if nf.version == version { // no booking changed the node meanwhile
		nf.entries[key] = e
	}
	nf.mu.Unlock()
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

// shapeID numbers a fitShapeKey for this session's memo keys.
func (p *plugin) shapeID(key string) int32 {
	p.shapeMu.Lock()
	defer p.shapeMu.Unlock()
	if p.shapes == nil {
		p.shapes = map[string]int32{}
	}
	id, ok := p.shapes[key]
	if !ok {
		id = int32(len(p.shapes))
		p.shapes[key] = id
	}
	return id
}

// touched forgets the node's memo: its bookings changed.
func (p *plugin) touched(node string) {
	nf, ok := p.fits[node]
	if !ok {
		return
	}
	nf.mu.Lock()
	nf.version++
	clear(nf.entries)
	nf.mu.Unlock()
}
