package vgpu

import (
	"fmt"
	"slices"
	"strings"

	schedapi "volcano.sh/volcano/pkg/scheduler/api"

	"github.com/volcano-vgpu/volcano-vgpu/plugins/placement"
)

// The gang view of a job (its siblings already placed, and what of it is
// still pending, by shape) is built once per job and session, on first use,
// and then kept current by the session's allocate and deallocate events:
// every status change of a task inside a session (allocate, pipeline,
// evict, and their undoing) raises one, after the new status is set. Before
// it was rebuilt from all of the job's tasks on every score and allocate.

// jobView is one job's gang view and what each of its tasks contributes.
type jobView struct {
	contrib     map[schedapi.TaskID]contribution
	placed      map[string]placement.Siblings // by node; GPUs slices are never changed in place
	placedTasks int
	pending     map[string]*placement.Pending // by shape
	shapes      []string                      // pending's keys, sorted
}

// contribution is what one task adds to its job's view: placed on a node
// (with its booked GPUs), or pending with a GPU shape, or nothing.
type contribution struct {
	node  string
	gpus  []string
	shape string
	req   *placement.Request
}

// contributionOf reads a task the way the view counts it.
func (p *plugin) contributionOf(t *schedapi.TaskInfo) contribution {
	switch {
	case schedapi.AllocatedStatus(t.Status) && t.NodeName != "":
		c := contribution{node: t.NodeName}
		if pl, ok := p.booked[t.UID]; ok {
			c.gpus = pl.UUIDs()
		}
		return c
	case t.Status == schedapi.Pending:
		if r := p.parsed(t); r.err == nil && r.req != nil {
			return contribution{shape: r.shape, req: r.req}
		}
	}
	return contribution{}
}

func newJobView(p *plugin, job *schedapi.JobInfo) *jobView {
	v := &jobView{contrib: make(map[schedapi.TaskID]contribution, len(job.Tasks)),
		placed: map[string]placement.Siblings{}, pending: map[string]*placement.Pending{}}
	for _, t := range job.Tasks {
		v.add(t.UID, p.contributionOf(t))
	}
	return v
}

func (v *jobView) add(uid schedapi.TaskID, c contribution) {
	v.contrib[uid] = c
	switch {
	case c.node != "":
		s := v.placed[c.node]
		s.Tasks++
		s.GPUs = slices.Concat(s.GPUs, c.gpus)
		v.placed[c.node] = s
		v.placedTasks++
	case c.shape != "":
		if pt, ok := v.pending[c.shape]; ok {
			pt.Count++
			return
		}
		v.pending[c.shape] = &placement.Pending{Request: c.req, Count: 1}
		i, _ := slices.BinarySearch(v.shapes, c.shape)
		v.shapes = slices.Insert(v.shapes, i, c.shape)
	}
}

func (v *jobView) remove(uid schedapi.TaskID) {
	c, ok := v.contrib[uid]
	if !ok {
		return
	}
	delete(v.contrib, uid)
	switch {
	case c.node != "":
		dropSibling(v.placed, c)
		v.placedTasks--
	case c.shape != "":
		pt := v.pending[c.shape]
		if pt.Count--; pt.Count == 0 {
			delete(v.pending, c.shape)
			if i, ok := slices.BinarySearch(v.shapes, c.shape); ok {
				v.shapes = slices.Delete(v.shapes, i, i+1)
			}
		}
	}
}

// dropSibling takes one placed task (c) out of placed, in place; the
// GPUs slice is replaced, never modified (views handed out earlier read it).
func dropSibling(placed map[string]placement.Siblings, c contribution) {
	s := placed[c.node]
	s.Tasks--
	s.GPUs = withoutGPUs(s.GPUs, c.gpus)
	if s.Tasks == 0 {
		delete(placed, c.node)
	} else {
		placed[c.node] = s
	}
}

// withoutGPUs is all minus one occurrence of each of drop, in a new slice
// (views handed out earlier may still read all).
func withoutGPUs(all, drop []string) []string {
	out := make([]string, 0, len(all))
	left := slices.Clone(drop)
	for _, g := range all {
		if i := slices.Index(left, g); i >= 0 {
			left = slices.Delete(left, i, i+1)
			continue
		}
		out = append(out, g)
	}
	return out
}

// without is the view as the task sees it: the job minus the task itself.
func (v *jobView) without(uid schedapi.TaskID) *placement.GangView {
	c := v.contrib[uid]
	g := &placement.GangView{Placed: v.placed, PlacedTasks: v.placedTasks, Pending: make([]placement.Pending, 0, len(v.shapes))}
	for _, k := range v.shapes {
		pt := *v.pending[k]
		if k == c.shape {
			if pt.Count--; pt.Count == 0 {
				continue
			}
		}
		g.Pending = append(g.Pending, pt)
	}
	if c.node != "" {
		g.Placed = make(map[string]placement.Siblings, len(v.placed))
		for node, s := range v.placed {
			g.Placed[node] = s
		}
		dropSibling(g.Placed, c)
		g.PlacedTasks--
	}
	return g
}

// gangView describes the task's job for scoring: siblings already placed
// (this session or earlier) and tasks still pending, grouped by shape; nil
// for a task alone in its job. Called from the session goroutine (scoring
// and the allocate event); the lock guards the views all the same.
func (p *plugin) gangView(task *schedapi.TaskInfo) *placement.GangView {
	job, ok := p.ssn.Jobs[task.Job]
	if !ok || len(job.Tasks) <= 1 {
		return nil
	}
	p.gangMu.Lock()
	defer p.gangMu.Unlock()
	v, ok := p.gangs[task.Job]
	if !ok {
		v = newJobView(p, job)
		p.gangs[task.Job] = v
	}
	return v.without(task.UID)
}

// gangEvent brings the task's job view (if built) up to date with the
// task's status and booking after an allocate or deallocate event.
func (p *plugin) gangEvent(task *schedapi.TaskInfo) {
	p.gangMu.Lock()
	defer p.gangMu.Unlock()
	v, ok := p.gangs[task.Job]
	if !ok {
		return
	}
	v.remove(task.UID)
	v.add(task.UID, p.contributionOf(task))
}

// shapeKey identifies requests that fit the same way, but for container
// names.
func shapeKey(r *placement.Request) string {
	var b strings.Builder
	for _, c := range r.Containers {
		fmt.Fprintf(&b, "%t/%t/%d/%d/%d/%d;", c.Init, c.Restartable, c.Number, c.MemoryMiB, c.MemoryPercent, c.Cores)
	}
	fmt.Fprintf(&b, "%q%q%q%q%s/%s/%s/%t/%s", r.TypeInclude, r.TypeExclude, r.UUIDInclude, r.UUIDExclude, r.Topology, r.DevicePolicy, r.Mode, r.SpreadGroup, r.MIGProfile)
	return b.String()
}

// fitShapeKey identifies requests whose Fit on a node returns the same
// Placement: the shape and the container names the Placement carries.
func fitShapeKey(r *placement.Request, shape string) string {
	names := make([]string, len(r.Containers))
	for i, c := range r.Containers {
		names[i] = c.Name
	}
	return shape + "|" + strings.Join(names, "\x00")
}
