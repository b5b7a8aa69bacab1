package vgpu

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	schedapi "volcano.sh/volcano/pkg/scheduler/api"
	"volcano.sh/volcano/pkg/scheduler/framework"

	"github.com/volcano-vgpu/volcano-vgpu/api"
	"github.com/volcano-vgpu/volcano-vgpu/plugins/placement"
)

// rebuiltGangView is the gang view computed from scratch from the job's
// tasks, the way the plugin did on every call before it kept views by
// events: the reference the kept views must equal.
func rebuiltGangView(p *plugin, task *schedapi.TaskInfo) *placement.GangView {
	job, ok := p.ssn.Jobs[task.Job]
	if !ok || len(job.Tasks) <= 1 {
		return nil
	}
	g := &placement.GangView{Placed: map[string]placement.Siblings{}}
	shapes := map[string]*placement.Pending{}
	var keys []string
	for _, t := range job.Tasks {
		if t.UID == task.UID {
			continue
		}
		switch {
		case schedapi.AllocatedStatus(t.Status) && t.NodeName != "":
			s := g.Placed[t.NodeName]
			s.Tasks++
			if pl, ok := p.booked[t.UID]; ok {
				s.GPUs = append(s.GPUs, pl.UUIDs()...)
			}
			g.Placed[t.NodeName] = s
			g.PlacedTasks++
		case t.Status == schedapi.Pending:
			r := p.parsed(t)
			if r.err != nil || r.req == nil {
				continue
			}
			if s, ok := shapes[r.shape]; ok {
				s.Count++
				continue
			}
			shapes[r.shape] = &placement.Pending{Request: r.req, Count: 1}
			keys = append(keys, r.shape)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		g.Pending = append(g.Pending, *shapes[k])
	}
	return g
}

// comparableView is a gang view with GPU lists sorted and pending requests
// named by shape (tasks of one shape parse to distinct but equal Requests).
type comparableView struct {
	Placed      map[string]placement.Siblings
	PlacedTasks int
	Pending     []string // "shape × count"
}

func comparable(g *placement.GangView) *comparableView {
	if g == nil {
		return nil
	}
	c := &comparableView{Placed: map[string]placement.Siblings{}, PlacedTasks: g.PlacedTasks}
	for node, s := range g.Placed {
		c.Placed[node] = placement.Siblings{Tasks: s.Tasks, GPUs: slices.Sorted(slices.Values(s.GPUs))}
	}
	for _, pt := range g.Pending {
		c.Pending = append(c.Pending, fmt.Sprintf("%s × %d", shapeKey(pt.Request), pt.Count))
	}
	return c
}

// eventSession is three 4-GPU nodes and four jobs: gang a (4 × one GPU),
// gang b (3 × two GPUs), job c (one exclusive GPU), gang d (3 tasks shaped
// like a's).
func eventSession(t testing.TB) *handSession {
	t.Helper()
	var nodes []*corev1.Node
	for i := range 3 {
		nodes = append(nodes, newGPUNode(fmt.Sprintf("n%d", i), "NVIDIA A100-SXM4-80GB", 4, 81920).nvlinkPairs().obj(t))
	}
	var pods []*corev1.Pod
	for i := range 4 {
		pods = append(pods, gpuPod("ns", fmt.Sprintf("a%d", i), "a", 1, 20000, 25))
	}
	for i := range 3 {
		pods = append(pods, gpuPod("ns", fmt.Sprintf("b%d", i), "b", 2, 30000, 40))
	}
	pods = append(pods, gpuPod("ns", "c0", "c", 1, 81920, 100))
	for i := range 3 { // shaped like gang a: its siblings must not steer a's GPUs
		pods = append(pods, gpuPod("ns", fmt.Sprintf("d%d", i), "d", 1, 20000, 25))
	}
	return newHandSession(t, nil, DefaultArgs(), nodes, pods)
}

// TestKeptViewsAndFitMemoMatchAFreshComputation drives a session through
// 300 random allocate, discard, evict and unevict events (and commits,
// which change Allocated to Running without an event: both count as placed). After each, for
// every task: the kept gang view equals one rebuilt from scratch, and the
// predicate, the scores and the allocation (answered from the Fit memo where
// it can) equal a fresh Fit and ScoreNode on the node as it is now.
func TestKeptViewsAndFitMemoMatchAFreshComputation(t *testing.T) {
	h := eventSession(t)
	p := h.plugin
	names := keys(h.tasks)
	rng := rand.New(rand.NewPCG(1, 2))
	check := func(step int, what string) {
		t.Helper()
		for _, name := range names {
			task := h.tasks[name]
			ref := rebuiltGangView(p, task)
			if d := cmp.Diff(comparable(ref), comparable(p.gangView(task))); d != "" {
				t.Fatalf("step %d (%s): gang view of %s (-rebuilt +kept):\n%s", step, what, name, d)
			}
			if task.Status != schedapi.Pending {
				continue
			}
			r := p.parsed(task)
			scores, _ := p.batchNodeOrder(task, h.nodeList())
			for _, ni := range h.nodeList() {
				n := p.nodes[ni.Name]
				_, reasons := placement.Fit(r.req, n, nil)
				if got := p.predicate(task, ni); (got == nil) != (len(reasons) == 0) {
					t.Fatalf("step %d (%s): predicate of %s on %s = %v, fresh Fit reasons %v", step, what, name, ni.Name, got, reasons)
				}
				pl, reasons := placement.Fit(r.req, n, ref)
				want, fits := 0.0, len(reasons) == 0
				if fits {
					want = p.args.Weight * placement.ScoreNode(r.req, n, pl, ref, r.nodePolicy)
				}
				if got, ok := scores[ni.Name]; ok != fits || got != want {
					t.Fatalf("step %d (%s): score of %s on %s = %v (scored %t), fresh %v (fits %t)", step, what, name, ni.Name, got, ok, want, fits)
				}
			}
		}
	}
	check(0, "open")
	for step := 1; step <= 300; step++ {
		name := names[rng.IntN(len(names))]
		task := h.tasks[name]
		var what string
		switch task.Status {
		case schedapi.Pending:
			node := fmt.Sprintf("n%d", rng.IntN(3))
			r := p.parsed(task)
			want, reasons := placement.Fit(r.req, p.nodes[node], rebuiltGangView(p, task))
			want = want.Clone()
			ev := allocateOn(h, name, node)
			what = "allocate " + name + " on " + node
			if (ev.Err == nil) != (len(reasons) == 0) {
				t.Fatalf("step %d (%s): err %v, fresh Fit reasons %v", step, what, ev.Err, reasons)
			}
			if ev.Err != nil {
				discard(h, name) // Volcano's UnAllocate
				break
			}
			if d := cmp.Diff(want, p.booked[task.UID]); d != "" {
				t.Fatalf("step %d (%s): booked (-fresh Fit +memo):\n%s", step, what, d)
			}
		case schedapi.Allocated:
			if rng.IntN(2) == 0 {
				what = "discard " + name
				discard(h, name) // Statement.Discard
				break
			}
			what = "commit " + name + " (running)"
			task.Status = schedapi.Running // bound and started in a later session; no event
		case schedapi.Running:
			what = "evict " + name // Statement.Evict
			task.Status = schedapi.Releasing
			p.deallocate(&framework.Event{Task: task})
		case schedapi.Releasing:
			what = "unevict " + name // Statement.unevict
			task.Status = schedapi.Running
			p.allocate(&framework.Event{Task: task})
		}
		check(step, what)
	}
}

// Two MIG asks naming different profiles do not fit alike.
func TestShapeKeyMIGProfile(t *testing.T) {
	a := &placement.Request{Containers: []placement.Container{{Name: "c", Number: 1, MemoryMiB: 1024}}, Mode: api.ModeMIG, MIGProfile: "1g.10gb"}
	b := *a
	b.MIGProfile = "3g.40gb"
	if shapeKey(a) == shapeKey(&b) {
		t.Errorf("shapeKey ignores the MIG profile: %s", shapeKey(a))
	}
}
