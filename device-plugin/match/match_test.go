package match

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

type step struct {
	ids       []string
	known     Known
	wantPod   string // "" when an error is expected
	wantCont  string
	wantErr   error
	errSubstr string
}

func TestForAllocate(t *testing.T) {
	tests := []struct {
		name  string
		pods  []*Pod
		steps []step
	}{{
		name: "two pods on the same GPU: once one is served the other is the only match",
		pods: []*Pod{pod("p1").app("main", "A").obj(), pod("p2").app("main", "A").obj()},
		steps: []step{
			{ids: []string{id("A", 0)}, known: knownOnly("p1"), wantPod: "p1", wantCont: "main"},
			{ids: []string{id("A", 1)}, wantPod: "p2", wantCont: "main"}, // p1 is done: no PodResources needed
		},
	}, {
		name: "two pending pods on the same GPU and no way to tell: refused",
		pods: []*Pod{pod("p1").app("main", "A").obj(), pod("p2").app("main", "A").obj()},
		steps: []step{
			{ids: []string{id("A", 0)}, wantErr: ErrAmbiguous, errSubstr: "ns/p1 container \"main\" (GPUs GPU-A); ns/p2"},
			{ids: []string{id("A", 0)}, known: knownOnly("p1", "p2"), wantErr: ErrAmbiguous, errSubstr: "refusing to guess"},
			{ids: []string{id("A", 0)}, known: knownOnly("p9"), wantErr: ErrNoMatch, errSubstr: "kubelet lists none of their pods"},
		},
	}, {
		name: "init container first, then the app container, on different GPUs",
		pods: []*Pod{pod("p1").init("setup", "A").app("main", "B", "C").obj()},
		steps: []step{
			{ids: []string{id("B", 0), id("C", 0)}, wantErr: ErrNoMatch, errSubstr: "pending: ns/p1 container \"setup\""},
			{ids: []string{id("A", 0)}, wantPod: "p1", wantCont: "setup"},
			{ids: []string{id("C", 3), id("B", 2)}, wantPod: "p1", wantCont: "main"},
			{ids: []string{id("A", 1)}, wantErr: ErrNoMatch, errSubstr: "no container is pending"},
		},
	}, {
		name: "kubelet reuses the init container's ID for the app container on another GPU",
		pods: []*Pod{pod("p1").init("setup", "A").app("main", "B").obj(), pod("p2").app("main", "A").obj()},
		steps: []step{
			{ids: []string{id("A", 0)}, known: knownOnly("p1"), wantPod: "p1", wantCont: "setup"},
			{ids: []string{id("A", 0)}, wantPod: "p1", wantCont: "main"}, // A::0 identifies p1, not p2
		},
	}, {
		name: "a sidecar keeps its devices: its IDs are not reused",
		pods: []*Pod{pod("p1").sidecar("proxy", "A").app("main", "B").obj()},
		steps: []step{
			{ids: []string{id("A", 0)}, wantPod: "p1", wantCont: "proxy"},
			{ids: []string{id("A", 0)}, wantErr: ErrNoMatch},
			{ids: []string{id("B", 0)}, wantPod: "p1", wantCont: "main"},
		},
	}, {
		name: "multi-container pod in spec order",
		pods: []*Pod{pod("p1").app("a", "A", "B").app("b", "A").obj()},
		steps: []step{
			{ids: []string{id("A", 0)}, wantErr: ErrNoMatch}, // "a" comes first and wants two GPUs
			{ids: []string{id("A", 0), id("B", 0)}, wantPod: "p1", wantCont: "a"},
			{ids: []string{id("A", 1)}, wantPod: "p1", wantCont: "b"},
		},
	}, {
		name: "wrong IDs are refused",
		pods: []*Pod{pod("p1").app("main", "A").obj()},
		steps: []step{
			{ids: []string{id("B", 0)}, wantErr: ErrNoMatch, errSubstr: "assigned exactly GPUs GPU-B"},
			{ids: []string{id("A", 0), id("A", 1)}, wantErr: ErrBadRequest, errSubstr: "both on GPU GPU-A"},
			{ids: []string{"nvidia0"}, wantErr: ErrBadRequest, errSubstr: "not a vgpu-number device ID"},
			{ids: nil, wantErr: ErrBadRequest},
		},
	}, {
		name: "a malformed assignment is named in the error",
		pods: []*Pod{pod("p1").app("main", "A").broken(errors.New("volcano-vgpu.io/assignment: expected a JSON object")).obj()},
		steps: []step{
			{ids: []string{id("A", 0)}, wantErr: ErrNoMatch, errSubstr: "ns/p1: volcano-vgpu.io/assignment: expected a JSON object"},
		},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pods, l := podMap(tc.pods...), NewLedger()
			for i, s := range tc.steps {
				r, err := ParseRequest(s.ids, pods, l)
				var c Candidate
				if err == nil {
					c, err = ForAllocate(r, pods, l, s.known)
				}
				if s.wantErr != nil {
					if !errors.Is(err, s.wantErr) || !strings.Contains(fmt.Sprint(err), s.errSubstr) {
						t.Fatalf("step %d: err = %v, want %v containing %q", i, err, s.wantErr, s.errSubstr)
					}
					continue
				}
				if err != nil {
					t.Fatalf("step %d: %v", i, err)
				}
				if c.Pod.Name != s.wantPod || c.Container().Name != s.wantCont {
					t.Fatalf("step %d: matched %s, want ns/%s container %q", i, c, s.wantPod, s.wantCont)
				}
				l.Record(c, s.ids)
			}
		})
	}
}

func TestLedgerLookupAndForget(t *testing.T) {
	p := pod("p1").app("main", "A", "B").obj()
	l := NewLedger()
	l.Record(Candidate{Pod: p, Index: 0}, []string{id("B", 0), id("A", 0)})
	if got := l.Lookup([]string{id("A", 0), id("B", 0)}); len(got) != 1 || got[0].Container != "main" {
		t.Fatalf("Lookup = %+v", got)
	}
	if l.Next(p.UID) != 1 {
		t.Errorf("Next = %d, want 1", l.Next(p.UID))
	}
	l.Forget(p.UID)
	if got := l.Lookup([]string{id("A", 0), id("B", 0)}); len(got) != 0 || l.Next(p.UID) != 0 {
		t.Errorf("after Forget: Lookup = %+v, Next = %d", got, l.Next(p.UID))
	}
}
