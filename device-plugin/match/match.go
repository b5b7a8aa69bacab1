// Package match is the pure core of Allocate and GetPreferredAllocation:
// it maps the device IDs kubelet hands the plugin to exactly one pending
// container of exactly one pod, using the scheduler's assignments, and
// never guesses. It has no Kubernetes client and does no I/O.
//
// Kubelet allocates the containers of one pod at a time, init containers
// first, then app containers, each in spec order; a pod's next container
// is therefore always the first one not yet served. A request matches a pod
// when that next container asks for as many GPUs as there are IDs and is
// assigned exactly the GPUs the IDs belong to. When several pods match,
// the caller narrows them to the pods kubelet is admitting (PodResources).
//
// One exception: kubelet hands the devices of finished init containers to
// the next containers of the same pod before anything else. IDs served to
// an init container of pod P therefore identify P, whatever GPU they are
// on; the container then gets the GPUs of its own assignment.
package match

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/volcano-vgpu/volcano-vgpu/api"
	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/replica"
)

// Sentinel errors; messages wrap them with what a person needs to act.
var (
	ErrBadRequest = errors.New("bad device request")
	ErrNoMatch    = errors.New("no pod matches the device request")
	ErrAmbiguous  = errors.New("several pods match the device request")
)

// Container is one container that requests vgpu-number, in kubelet order.
type Container struct {
	Name        string
	Init        bool
	Restartable bool // a sidecar: keeps its devices, kubelet does not reuse them
	Count       int  // vgpu-number requested
	Devices     []api.DeviceShare
}

// Pod is a pod bound to this node with at least one such container.
type Pod struct {
	UID, Namespace, Name string
	Containers           []Container
	// Err is set when the assignment is missing or malformed; such a pod
	// never matches, but its error is reported when it might have.
	Err error
}

// Key returns namespace/name.
func (p *Pod) Key() string { return p.Namespace + "/" + p.Name }

// Candidate is container Index of Pod.
type Candidate struct {
	Pod   *Pod
	Index int
}

// Container returns the candidate's container.
func (c Candidate) Container() *Container { return &c.Pod.Containers[c.Index] }

func (c Candidate) String() string {
	return fmt.Sprintf("%s container %q (GPUs %s)", c.Pod.Key(), c.Container().Name, strings.Join(uuids(c.Container().Devices), ","))
}

// Known reports whether kubelet knows a pod (namespace, name); nil means
// kubelet cannot be asked.
type Known func(namespace, name string) bool

// Request is a parsed device request.
type Request struct {
	IDs   []string
	GPUs  []string // one per ID, sorted
	Reuse *Pod     // set when the IDs were served to an init container of this pod
}

// ParseRequest maps IDs to GPUs and detects init-container reuse.
func ParseRequest(ids []string, pods map[string]*Pod, l *Ledger) (Request, error) {
	if len(ids) == 0 {
		return Request{}, fmt.Errorf("%w: no device IDs", ErrBadRequest)
	}
	r := Request{IDs: ids, GPUs: make([]string, 0, len(ids))}
	seen := make(map[string]string, len(ids))
	for _, id := range ids {
		u, _, err := replica.Parse(id)
		if err != nil {
			return Request{}, fmt.Errorf("%w: %w", ErrBadRequest, err)
		}
		if r.Reuse == nil {
			r.Reuse = l.reusedBy(id, pods)
		}
		if other, dup := seen[u]; dup && r.Reuse == nil {
			return Request{}, fmt.Errorf("%w: IDs %s and %s are both on GPU %s; an assignment uses a GPU at most once per container", ErrBadRequest, other, id, u)
		}
		seen[u] = id
		r.GPUs = append(r.GPUs, u)
	}
	sort.Strings(r.GPUs)
	return r, nil
}

// ForAllocate returns the one container the request is for. With known,
// only pods kubelet lists are candidates.
func ForAllocate(r Request, pods map[string]*Pod, l *Ledger, known Known) (Candidate, error) {
	var cands []Candidate
	if r.Reuse != nil {
		if c, ok := next(r.Reuse, l); ok && c.Container().Count == len(r.IDs) {
			return c, nil
		}
		return Candidate{}, fmt.Errorf("%w: IDs %s were served to an init container of %s, which has no pending container asking for %d GPUs", ErrNoMatch, strings.Join(r.IDs, ","), r.Reuse.Key(), len(r.IDs))
	}
	for _, p := range pods {
		if c, ok := next(p, l); ok && sameGPUs(c.Container().Devices, r.GPUs) {
			cands = append(cands, c)
		}
	}
	if known != nil && len(cands) > 0 {
		narrowed := slices.DeleteFunc(slices.Clone(cands), func(c Candidate) bool { return !known(c.Pod.Namespace, c.Pod.Name) })
		if len(narrowed) == 0 {
			sortCandidates(cands)
			return Candidate{}, &matchError{msg: fmt.Sprintf("%v: %d pending container(s) are assigned exactly GPUs %s but kubelet lists none of their pods (%s)", ErrNoMatch, len(cands), strings.Join(r.GPUs, ","), list(cands))}
		}
		cands = narrowed
	}
	switch len(cands) {
	case 1:
		return cands[0], nil
	case 0:
		return Candidate{}, noMatch(r, pods, l)
	}
	sortCandidates(cands)
	return Candidate{}, fmt.Errorf("%w: %d pending containers are assigned exactly GPUs %s and kubelet cannot tell which one it is admitting: %s; refusing to guess", ErrAmbiguous, len(cands), strings.Join(r.GPUs, ","), list(cands))
}

// next returns the pod's next container kubelet will allocate.
func next(p *Pod, l *Ledger) (Candidate, bool) {
	if p.Err != nil {
		return Candidate{}, false
	}
	i := l.Next(p.UID)
	if i >= len(p.Containers) {
		return Candidate{}, false
	}
	return Candidate{Pod: p, Index: i}, true
}

func sameGPUs(devs []api.DeviceShare, sorted []string) bool {
	if len(devs) != len(sorted) {
		return false
	}
	for _, d := range devs {
		if _, ok := slices.BinarySearch(sorted, d.UUID); !ok {
			return false
		}
	}
	return true
}

func noMatch(r Request, pods map[string]*Pod, l *Ledger) error {
	var pending, broken []string
	for _, p := range sortedPods(pods) {
		if p.Err != nil {
			broken = append(broken, fmt.Sprintf("%s: %v", p.Key(), p.Err))
			continue
		}
		if c, ok := next(p, l); ok && len(pending) < 5 {
			pending = append(pending, c.String())
		}
	}
	msg := fmt.Sprintf("%v: no pod bound to this node has a pending container assigned exactly GPUs %s (IDs %s)", ErrNoMatch, strings.Join(r.GPUs, ","), strings.Join(r.IDs, ","))
	if len(broken) > 0 {
		msg += "; pods with an unusable assignment: " + strings.Join(broken, "; ")
	}
	if len(pending) > 0 {
		msg += "; pending: " + strings.Join(pending, "; ")
	} else {
		msg += "; no container is pending (is the scheduler's assignment annotation on the pod?)"
	}
	return &matchError{msg: msg}
}

type matchError struct{ msg string }

func (e *matchError) Error() string { return e.msg }
func (e *matchError) Unwrap() error { return ErrNoMatch }

func list(cands []Candidate) string {
	s := make([]string, len(cands))
	for i, c := range cands {
		s[i] = c.String()
	}
	return strings.Join(s, "; ")
}

func uuids(devs []api.DeviceShare) []string {
	out := make([]string, len(devs))
	for i, d := range devs {
		out[i] = d.UUID
	}
	return out
}

func sortedPods(pods map[string]*Pod) []*Pod {
	out := make([]*Pod, 0, len(pods))
	for _, p := range pods {
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key() < out[j].Key() })
	return out
}

func sortCandidates(c []Candidate) {
	sort.Slice(c, func(i, j int) bool { return c[i].Pod.Key() < c[j].Pod.Key() })
}
