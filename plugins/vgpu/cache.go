package vgpu

import (
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	schedapi "volcano.sh/volcano/pkg/scheduler/api"

	"github.com/volcano-vgpu/volcano-vgpu/api"
	"github.com/volcano-vgpu/volcano-vgpu/plugins/placement"
)

// decodeCache keeps the decoded form of each node's inventory annotation
// (keyed by node name) and of each pod's assignment annotation (keyed by pod
// UID), checked against the annotation's exact text, so a session open over
// thousands of unchanged nodes and pods decodes nothing. Entries not used for
// a session are swept.
type decodeCache struct {
	mu    sync.Mutex
	gen   uint64
	nodes map[string]*nodeEntry
	pods  map[types.UID]*podEntry
}

type nodeEntry struct {
	value string
	tmpl  *placement.Node // usage zero; Links shared read-only by every copy
	beat  time.Time       // inventory heartbeat
	err   error
	gen   uint64
}

// podEntry is a decoded assignment. pl is shared by every session that books
// it: Apply, Release and toAssignment only read a Placement.
type podEntry struct {
	value  string
	podUID string // the UID the assignment was written for
	pl     placement.Placement
	err    error
	gen    uint64
}

func newDecodeCache() *decodeCache {
	return &decodeCache{nodes: map[string]*nodeEntry{}, pods: map[types.UID]*podEntry{}}
}

// node returns a fresh, usage-free copy of the node's GPUs.
func (c *decodeCache) node(node *corev1.Node, now time.Time, staleAfter time.Duration) (*placement.Node, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	value := node.Annotations[api.InventoryKey]
	e, ok := c.nodes[node.Name]
	if !ok || e.value != value {
		tmpl, beat, err := nodeFromInventory(node)
		e = &nodeEntry{value: value, tmpl: tmpl, beat: beat, err: err}
		c.nodes[node.Name] = e
	}
	e.gen = c.gen
	if e.err != nil || e.tmpl == nil {
		return nil, e.err
	}
	n := *e.tmpl
	n.GPUs = slices.Clone(e.tmpl.GPUs)
	// Staleness belongs to the moment, not to the text: set it per session.
	n.Stale = now.Sub(e.beat) > staleAfter
	return &n, nil
}

// assignment returns the placement an assignment annotation of the pod uid
// records, and the pod UID it was written for.
func (c *decodeCache) assignment(uid types.UID, value string) (placement.Placement, string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.pods[uid]
	if !ok || e.value != value {
		a, err := api.DecodeAssignment(value)
		e = &podEntry{value: value, podUID: a.PodUID, err: err}
		if err == nil {
			e.pl = fromAssignment(a)
		}
		c.pods[uid] = e
	}
	e.gen = c.gen
	return e.pl, e.podUID, e.err
}

// assignments is the number of cached assignments: about as many pods as
// the next session books.
func (c *decodeCache) assignments() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.pods)
}

// sweep drops entries unused since the previous sweep.
func (c *decodeCache) sweep() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for name, e := range c.nodes {
		if e.gen != c.gen {
			delete(c.nodes, name)
		}
	}
	for uid, e := range c.pods {
		if e.gen != c.gen {
			delete(c.pods, uid)
		}
	}
	c.gen++
}

// buildState rebuilds every GPU node's usage from the pods on it.
func (p *plugin) buildState(nodes map[string]*schedapi.NodeInfo, now time.Time) {
	p.nodes = make(map[string]*placement.Node, len(nodes))
	p.fits = make(map[string]*nodeFits, len(nodes))
	p.gangs = map[schedapi.JobID]*jobView{}
	p.nodeErr = map[string]error{}
	p.booked = make(map[schedapi.TaskID]placement.Placement, p.shared.cache.assignments()) // last session's count
	p.evicted = map[schedapi.TaskID]placement.Placement{}
	for name, ni := range nodes {
		if ni.Node == nil {
			continue
		}
		n, err := p.shared.cache.node(ni.Node, now, p.args.StaleAfter)
		if err != nil {
			p.log.V(2).Info("Node has a malformed GPU inventory; it gets no GPU pods", "node", name, "err", err)
			p.nodeErr[name] = err
			continue
		}
		if n == nil {
			continue
		}
		for _, t := range ni.Tasks {
			if t.Pod == nil || terminated(t.Pod) {
				continue
			}
			pl, ok, err := podPlacement(t.Pod, p.shared.cache, p.shared.Inflight)
			if err != nil {
				p.log.V(2).Info("Pod has a malformed GPU assignment; its GPUs count as free", "pod", klog.KObj(t.Pod), "err", err)
				continue
			}
			if !ok {
				continue
			}
			pl.Node = name
			if err := placement.Apply(n, pl); err != nil {
				p.log.V(2).Info("Pod's GPU assignment does not match the node inventory", "pod", klog.KObj(t.Pod), "node", name, "err", err)
				continue
			}
			p.booked[t.UID] = pl
		}
		p.nodes[name] = n
		p.fits[name] = newNodeFits(n, len(p.fits))
		p.log.V(5).Info("GPU node state", "node", name, "gpus", len(n.GPUs), "stale", n.Stale)
	}
}
