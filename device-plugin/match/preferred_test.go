package match

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func all(gpus string, shares int) []string {
	var out []string
	for _, g := range gpus {
		for k := range shares {
			out = append(out, id(string(g), k))
		}
	}
	return out
}

func TestPreferred(t *testing.T) {
	tests := []struct {
		name   string
		pods   []*Pod
		served map[string][]string // pod → IDs served to its first container
		req    PreferredRequest
		known  Known
		want   []string
	}{{
		name: "steers to the one pending container's GPUs, lowest free replica",
		pods: []*Pod{pod("p1").app("main", "C", "A").obj()},
		req:  PreferredRequest{Available: without(all("ABCD", 3), id("C", 0)), Size: 2},
		want: []string{id("C", 1), id("A", 0)},
	}, {
		name: "candidates of other sizes do not count",
		pods: []*Pod{pod("p1").app("main", "B").obj(), pod("p2").app("main", "C", "D").obj()},
		req:  PreferredRequest{Available: all("ABCD", 2), Size: 1},
		want: []string{id("B", 0)},
	}, {
		name: "candidates agree on the GPU: fine",
		pods: []*Pod{pod("p1").app("main", "B").obj(), pod("p2").app("main", "B").obj()},
		req:  PreferredRequest{Available: all("ABCD", 2), Size: 1},
		want: []string{id("B", 0)},
	}, {
		name: "candidates disagree: kubelet's default",
		pods: []*Pod{pod("p1").app("main", "B").obj(), pod("p2").app("main", "C").obj()},
		req:  PreferredRequest{Available: all("ABCD", 2), Size: 1},
		want: nil,
	}, {
		name:  "candidates disagree, kubelet lists one",
		pods:  []*Pod{pod("p1").app("main", "B").obj(), pod("p2").app("main", "C").obj()},
		req:   PreferredRequest{Available: all("ABCD", 2), Size: 1},
		known: knownOnly("p2"),
		want:  []string{id("C", 0)},
	}, {
		name:  "the one candidate is a pod kubelet does not list (bound, not yet admitted): nil, not its GPUs",
		pods:  []*Pod{pod("p1").app("main", "B").obj()},
		req:   PreferredRequest{Available: all("ABCD", 2), Size: 1},
		known: knownOnly("p2"),
		want:  nil,
	}, {
		name:  "candidates agree, but kubelet lists neither (its pod is not cached yet): nil",
		pods:  []*Pod{pod("p2").app("main", "C").obj(), pod("p3").app("main", "C").obj()},
		req:   PreferredRequest{Available: all("ABCD", 2), Size: 1},
		known: knownOnly("p1"),
		want:  nil,
	}, {
		name: "a GPU with no free replica rules the candidate out",
		pods: []*Pod{pod("p1").app("main", "B").obj(), pod("p2").app("main", "C").obj()},
		req:  PreferredRequest{Available: without(all("ABCD", 2), id("B", 0), id("B", 1)), Size: 1},
		want: []string{id("C", 0)},
	}, {
		name:   "must-include from the pod's init container, rest on its assigned GPUs",
		pods:   []*Pod{pod("p1").init("setup", "A").app("main", "C", "D").obj(), pod("p2").app("main", "B", "C").obj()},
		served: map[string][]string{"p1": {id("A", 0)}},
		req:    PreferredRequest{Available: append(all("BCD", 2), id("A", 0)), MustInclude: []string{id("A", 0)}, Size: 2},
		want:   []string{id("A", 0), id("C", 0)},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pods, l := podMap(tc.pods...), NewLedger()
			for _, p := range tc.pods {
				if ids, ok := tc.served[p.Name]; ok {
					l.Record(Candidate{Pod: p, Index: 0}, ids)
				}
			}
			got := Preferred(tc.req, pods, l, tc.known)
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("Preferred (-want +got):\n%s", d)
			}
		})
	}
}

func without(ids []string, drop ...string) []string {
	var out []string
	for _, x := range ids {
		keep := true
		for _, d := range drop {
			keep = keep && x != d
		}
		if keep {
			out = append(out, x)
		}
	}
	return out
}
