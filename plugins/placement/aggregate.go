package placement

import (
	"fmt"
	"sort"
	"strings"
)

// Aggregator groups the node-level reasons of many failed Fits the way
// kube-scheduler summarises a failed pod: "3 nodes: no GPU with 8192 MiB free
// (largest free 6144 MiB on GPU-…); 2 nodes: inventory stale; 1 node: needs 4
// GPUs, 2 healthy". A node counts once per kind of reason; one node can have
// several kinds. The zero value is ready; it is not safe for concurrent use.
type Aggregator struct {
	nodes  int
	groups []aggGroup
}

type aggKey struct {
	code      Code
	want      int64
	count     int
	percent   int
	container string
	detail    string
}

type aggGroup struct {
	key              aggKey
	r                Reason // holds the largest Have seen, with its GPU
	nodes            int
	minHave, maxHave int64
}

func keyOf(r *Reason) aggKey {
	k := aggKey{code: r.Code, want: r.Want, count: r.Count, percent: r.Percent, container: r.Container, detail: r.Detail}
	if r.Percent > 0 {
		k.want = 0 // MiB differ per GPU model; the percentage is the ask
	}
	return k
}

// Add records one node's reasons (as Fit returned them); per-GPU reasons are
// ignored.
func (a *Aggregator) Add(node string, reasons []Reason) {
	a.nodes++
	for i := range reasons {
		r := &reasons[i]
		if !r.NodeLevel() || a.seen(reasons[:i], r) {
			continue
		}
		k := keyOf(r)
		gi := -1
		for j := range a.groups {
			if a.groups[j].key == k {
				gi = j
				break
			}
		}
		if gi < 0 {
			a.groups = append(a.groups, aggGroup{key: k, r: *r, minHave: r.Have, maxHave: r.Have})
			gi = len(a.groups) - 1
		}
		g := &a.groups[gi]
		g.nodes++
		g.minHave = min(g.minHave, r.Have)
		if r.Have > g.maxHave {
			g.maxHave, g.r = r.Have, *r
		}
	}
}

func (a *Aggregator) seen(before []Reason, r *Reason) bool {
	for i := range before {
		if before[i].NodeLevel() && keyOf(&before[i]) == keyOf(r) {
			return true
		}
	}
	return false
}

// Nodes is how many nodes were added.
func (a *Aggregator) Nodes() int { return a.nodes }

// String renders the groups, most nodes first.
func (a *Aggregator) String() string {
	groups := append([]aggGroup(nil), a.groups...)
	sort.SliceStable(groups, func(i, j int) bool { return groups[i].nodes > groups[j].nodes })
	parts := make([]string, 0, len(groups))
	for _, g := range groups {
		r, atMost := g.r, false
		switch r.Code {
		case CodeTooFewHealthy, CodeTooFewMatching, CodeTooFewFit:
			atMost = g.minHave != g.maxHave
		case CodeExclusiveHeld, CodeShared, CodeSharesFull:
			r.Have = -1 // per-node GPU counts do not add up across nodes
		}
		unit := "nodes"
		if g.nodes == 1 {
			unit = "node"
		}
		parts = append(parts, fmt.Sprintf("%d %s: %s", g.nodes, unit, r.nodeText(atMost)))
	}
	return strings.Join(parts, "; ")
}
