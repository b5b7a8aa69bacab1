package match

import (
	"slices"
	"sort"
	"strings"
)

// Served is one container the plugin allocated.
type Served struct {
	PodUID, Namespace, Name string
	Container               string
	Init, Restartable       bool
	Index                   int      // position in kubelet order
	IDs                     []string // sorted
}

// Ledger records what the plugin served, per pod, so the next container of
// each pod is known and PreStartContainer can find what Allocate returned.
// It is not safe for concurrent use.
type Ledger struct {
	pods  map[string][]Served // pod UID → served containers
	byIDs map[string][]Served // sorted IDs joined → served containers
	// initIDs maps IDs served to non-restartable init containers to their pods.
	initIDs map[string]map[string]bool
}

// NewLedger returns an empty ledger.
func NewLedger() *Ledger {
	return &Ledger{pods: map[string][]Served{}, byIDs: map[string][]Served{}, initIDs: map[string]map[string]bool{}}
}

// Next returns how many containers of the pod have been served, which is the
// index of the next one in kubelet order.
func (l *Ledger) Next(podUID string) int {
	n := 0
	for _, s := range l.pods[podUID] {
		n = max(n, s.Index+1)
	}
	return n
}

// Record notes that the candidate got ids.
func (l *Ledger) Record(c Candidate, ids []string) Served {
	ct := c.Container()
	s := Served{
		PodUID: c.Pod.UID, Namespace: c.Pod.Namespace, Name: c.Pod.Name,
		Container: ct.Name, Init: ct.Init, Restartable: ct.Restartable, Index: c.Index, IDs: sortedCopy(ids),
	}
	l.Restore(s)
	return s
}

// Restore adds a record, e.g. one read back from disk after a restart.
func (l *Ledger) Restore(s Served) {
	s.IDs = sortedCopy(s.IDs)
	l.pods[s.PodUID] = append(l.pods[s.PodUID], s)
	k := key(s.IDs)
	l.byIDs[k] = append(l.byIDs[k], s)
	if s.Init && !s.Restartable {
		for _, id := range s.IDs {
			if l.initIDs[id] == nil {
				l.initIDs[id] = map[string]bool{}
			}
			l.initIDs[id][s.PodUID] = true
		}
	}
}

// reusedBy returns the pod, still allocating, whose init container got id.
func (l *Ledger) reusedBy(id string, pods map[string]*Pod) *Pod {
	for uid := range l.initIDs[id] {
		p := pods[uid]
		if p != nil && p.Err == nil && l.Next(uid) < len(p.Containers) {
			return p
		}
	}
	return nil
}

// Lookup returns the containers that were served exactly ids.
func (l *Ledger) Lookup(ids []string) []Served {
	return slices.Clone(l.byIDs[key(sortedCopy(ids))])
}

// Pod returns what was served to the pod's containers.
func (l *Ledger) Pod(uid string) []Served { return slices.Clone(l.pods[uid]) }

// PodUIDs lists the pods with records.
func (l *Ledger) PodUIDs() []string {
	out := make([]string, 0, len(l.pods))
	for uid := range l.pods {
		out = append(out, uid)
	}
	sort.Strings(out)
	return out
}

// Forget drops a pod's records.
func (l *Ledger) Forget(uid string) {
	for _, s := range l.pods[uid] {
		k := key(s.IDs)
		l.byIDs[k] = slices.DeleteFunc(l.byIDs[k], func(x Served) bool { return x.PodUID == uid })
		if len(l.byIDs[k]) == 0 {
			delete(l.byIDs, k)
		}
		for _, id := range s.IDs {
			delete(l.initIDs[id], uid)
			if len(l.initIDs[id]) == 0 {
				delete(l.initIDs, id)
			}
		}
	}
	delete(l.pods, uid)
}

func key(sorted []string) string { return strings.Join(sorted, ",") }

func sortedCopy(ids []string) []string {
	out := slices.Clone(ids)
	sort.Strings(out)
	return out
}
