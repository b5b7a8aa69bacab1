package match

import (
	"slices"
	"sort"
	"strings"

	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/replica"
)

// PreferredRequest is kubelet's GetPreferredAllocation for one container.
type PreferredRequest struct {
	Available   []string
	MustInclude []string
	Size        int
}

// Preferred returns the IDs kubelet should allocate: MustInclude plus one
// available ID on each GPU assigned to the container kubelet is about to
// allocate. Kubelet does not say which pod that is, so every pod's next
// container of the right size whose GPUs all have a free ID is a candidate;
// with known, only pods kubelet lists count. When no candidate is left, or
// the candidates do not agree on the GPUs, Preferred returns nil and kubelet
// picks on its own, leaving the decision to Allocate.
func Preferred(req PreferredRequest, pods map[string]*Pod, l *Ledger, known Known) []string {
	free := map[string][]string{} // GPU → available IDs not in MustInclude, sorted
	must := map[string]bool{}
	for _, id := range req.MustInclude {
		must[id] = true
	}
	for _, id := range req.Available {
		if u := replica.UUID(id); u != "" && !must[id] {
			free[u] = append(free[u], id)
		}
	}
	for _, ids := range free {
		sortByReplica(ids)
	}
	var reuse *Pod
	for _, id := range req.MustInclude {
		if reuse = l.reusedBy(id, pods); reuse != nil {
			break
		}
	}
	var cands []Candidate
	for _, p := range pods {
		if reuse != nil && p != reuse {
			continue
		}
		c, ok := next(p, l)
		if !ok || c.Container().Count != req.Size || !fits(c, req.MustInclude, free, reuse != nil) {
			continue
		}
		cands = append(cands, c)
	}
	if known != nil {
		// Kubelet lists the pod it is admitting before it asks, so a pod it
		// does not list (bound, not yet at kubelet) is never the one: steering
		// to its GPUs hands the admitted pod another pod's assignment, which
		// Allocate must then refuse.
		cands = slices.DeleteFunc(cands, func(c Candidate) bool { return !known(c.Pod.Namespace, c.Pod.Name) })
	}
	if len(cands) == 0 || !agree(cands) {
		return nil
	}
	return pick(cands[0], req, free)
}

// fits reports whether the container's GPUs can be served from MustInclude
// plus free IDs. With reuse, MustInclude may sit on any GPU.
func fits(c Candidate, mustInclude []string, free map[string][]string, reuse bool) bool {
	assigned := map[string]bool{}
	for _, d := range c.Container().Devices {
		assigned[d.UUID] = true
	}
	covered := map[string]bool{}
	for _, id := range mustInclude {
		u := replica.UUID(id)
		if !assigned[u] && !reuse {
			return false
		}
		covered[u] = true
	}
	need := len(c.Container().Devices) - len(mustInclude)
	for u := range assigned {
		if need <= 0 {
			break
		}
		if !covered[u] {
			if len(free[u]) == 0 {
				return false
			}
			need--
		}
	}
	return need <= 0
}

func agree(cands []Candidate) bool {
	first := gpuKey(cands[0])
	for _, c := range cands[1:] {
		if gpuKey(c) != first {
			return false
		}
	}
	return true
}

func gpuKey(c Candidate) string {
	u := uuids(c.Container().Devices)
	sort.Strings(u)
	return strings.Join(u, ",")
}

func pick(c Candidate, req PreferredRequest, free map[string][]string) []string {
	out := slices.Clone(req.MustInclude)
	covered := map[string]bool{}
	for _, id := range req.MustInclude {
		covered[replica.UUID(id)] = true
	}
	for _, d := range c.Container().Devices {
		if len(out) >= req.Size {
			break
		}
		if !covered[d.UUID] && len(free[d.UUID]) > 0 {
			out = append(out, free[d.UUID][0])
			covered[d.UUID] = true
		}
	}
	return out
}

func sortByReplica(ids []string) {
	sort.Slice(ids, func(i, j int) bool {
		_, a, _ := replica.Parse(ids[i])
		_, b, _ := replica.Parse(ids[j])
		return a < b
	})
}
