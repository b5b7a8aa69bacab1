package vgpu

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/klog/v2"
	schedapi "volcano.sh/volcano/pkg/scheduler/api"
	"volcano.sh/volcano/pkg/scheduler/framework"

	"github.com/volcano-vgpu/volcano-vgpu/plugins/placement"
)

// unschedulable wraps reasons the way Volcano aggregates them over nodes:
// identical texts are counted ("3 node(s) no GPU with 8192 MiB free"), so
// node-specific numbers stay out of them (the closest refusal is named once,
// at session close; the rest is logged at V(5)). code says whether evicting
// pods could help (Unschedulable) or not (UnschedulableAndUnresolvable), so
// preempt and reclaim skip nodes where no victim would make room.
func unschedulable(task *schedapi.TaskInfo, node *schedapi.NodeInfo, code int, reasons ...string) error {
	sts := make([]*schedapi.Status, len(reasons))
	for i, r := range reasons {
		sts[i] = &schedapi.Status{Code: code, Reason: r, Plugin: PluginName}
	}
	return schedapi.NewFitErrWithStatus(task, node, sts...)
}

func (p *plugin) refuseAll(task *schedapi.TaskInfo, node *schedapi.NodeInfo) error {
	if req, _, _ := requestOf(task.Pod, &p.args); req == nil {
		return nil
	}
	p.shared.metrics.refusedFor(reasonInvalidArguments)
	return unschedulable(task, node, schedapi.UnschedulableAndUnresolvable, "vgpu plugin arguments are invalid (see the scheduler log)")
}

// prePredicate refuses a malformed vGPU request once per task, before any
// node is tried.
func (p *plugin) prePredicate(task *schedapi.TaskInfo) error {
	if m := p.shared.metrics; m != nil {
		defer m.observe(hookPrePredicate, time.Now())
	}
	if _, err := p.request(task); err != nil {
		return fmt.Errorf("invalid vGPU request: %w", err)
	}
	return nil
}

// predicate: the node has GPUs that fit every container of the task. Volcano
// calls it from several goroutines at once; it only reads session state.
func (p *plugin) predicate(task *schedapi.TaskInfo, node *schedapi.NodeInfo) error {
	if m := p.shared.metrics; m != nil && m.samplePredicate() {
		defer m.observe(hookPredicate, time.Now())
	}
	r := p.parsed(task)
	if r.err != nil {
		p.shared.metrics.code(placement.CodeInvalidRequest)
		return unschedulable(task, node, schedapi.UnschedulableAndUnresolvable, "invalid vGPU request: "+r.err.Error())
	}
	if r.req == nil {
		return nil
	}
	nf, ok := p.fits[node.Name]
	if !ok {
		if err := p.nodeErr[node.Name]; err != nil {
			p.shared.metrics.refusedFor(reasonMalformedInventory)
			return unschedulable(task, node, schedapi.UnschedulableAndUnresolvable, "node GPU inventory is malformed (check the vgpu-device-plugin on it)")
		}
		p.shared.metrics.refusedFor(reasonNoInventory)
		return unschedulable(task, node, schedapi.UnschedulableAndUnresolvable, "node has no vGPU inventory (no vgpu-device-plugin)")
	}
	// The gang steers only the choice of GPUs, which the predicate does not
	// need, except for a task that must keep off its siblings' GPUs.
	var gang *placement.GangView
	if r.req.SpreadGroup {
		gang = p.gangView(task)
	}
	if e := p.fit(r, task.Job, nf, gang); len(e.reasons) > 0 {
		return p.refuse(task, node, e.reasons)
	}
	return nil
}

// refuse renders a failed Fit for Volcano: only the node-level summaries
// (rendering the per-GPU reasons too was most of the cost of a refusal), and
// remembers the refusal nearest to fitting for the task's message.
func (p *plugin) refuse(task *schedapi.TaskInfo, node *schedapi.NodeInfo, reasons []placement.Reason) error {
	p.shared.metrics.refused(reasons)
	texts := make([]string, 0, 4)
	code := schedapi.UnschedulableAndUnresolvable
	for _, r := range reasons {
		if !r.NodeLevel() {
			continue
		}
		if s := p.reasonText(r); !slices.Contains(texts, s) {
			texts = append(texts, s)
		}
		if evictionMayHelp(r.Code) {
			code = schedapi.Unschedulable
		}
	}
	if len(texts) == 0 {
		texts = append(texts, reasons[0].Short())
		code = schedapi.Unschedulable
	}
	if v, ok := p.closest.Load(task.UID); ok {
		v.(*closestOf).add(node.Name, reasons)
	} else {
		c := &closestOf{}
		c.add(node.Name, reasons)
		if v, loaded := p.closest.LoadOrStore(task.UID, c); loaded {
			v.(*closestOf).add(node.Name, reasons)
		}
	}
	if logV := p.log.V(5); logV.Enabled() {
		logV.Info("Task does not fit node", "pod", klog.KObj(task.Pod), "node", node.Name, "reasons", fmt.Sprint(reasons))
	}
	return unschedulable(task, node, code, texts...)
}

// evictionMayHelp: a node refused for this reason could take the task once
// other pods leave it. Stale or missing inventory, too few healthy or
// matching GPUs and invalid requests stay whatever is evicted.
func evictionMayHelp(c placement.Code) bool {
	switch c {
	case placement.CodeTooFewFit, placement.CodeTopology, placement.CodeExclusiveHeld, placement.CodeSharesFull,
		placement.CodeShared, placement.CodeMemory, placement.CodeCores:
		return true
	}
	return false
}

// closestOf is one task's nearest refusal, shared by concurrent predicates.
type closestOf struct {
	mu sync.Mutex
	c  placement.Closest
}

func (c *closestOf) add(node string, reasons []placement.Reason) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.c.Add(node, reasons)
}

func (c *closestOf) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.c.String()
}

// explainRefusals names, in the message Volcano writes on each pending pod
// (condition and event) and on its PodGroup, the node and GPU that came
// nearest to fitting with the numbers: "0/5 nodes are unavailable; nearest:
// a100-0 GPU-1a2b (A100-80GB): 6144 MiB free, container "train" asks 8192
// MiB: 3 …". Volcano renders those messages after every plugin has closed,
// except gang's PodGroup condition, which may already hold the old text.
func (p *plugin) explainRefusals(ssn *framework.Session) {
	for _, job := range ssn.Jobs {
		for uid, fe := range job.NodesFitErrors {
			v, ok := p.closest.Load(uid)
			if !ok || fe == nil {
				continue
			}
			nearest := v.(*closestOf).String()
			if nearest == "" {
				continue
			}
			before := fe.Error()
			head := before
			if i := strings.Index(before, ": "); i >= 0 {
				head = before[:i]
			}
			if strings.Contains(head, "; nearest: ") {
				continue
			}
			fe.SetError(head + "; nearest: " + nearest)
			after := fe.Error()
			if job.PodGroup == nil {
				continue
			}
			for i := range job.PodGroup.Status.Conditions {
				c := &job.PodGroup.Status.Conditions[i]
				if c.TransitionID == string(ssn.UID) {
					c.Message = strings.Replace(c.Message, before, after, 1)
				}
			}
		}
	}
}

// reasonText is r.Short(), rendered once per session for each distinct
// reason: a busy cluster refuses most nodes for the same few reasons.
func (p *plugin) reasonText(r placement.Reason) string {
	r = r.ShortKey()
	p.textMu.RLock()
	s, ok := p.texts[r]
	p.textMu.RUnlock()
	if ok {
		return s
	}
	s = r.Short()
	p.textMu.Lock()
	defer p.textMu.Unlock()
	if p.texts == nil {
		p.texts = map[placement.Reason]string{}
	}
	p.texts[r] = s
	return s
}

// batchNodeOrder scores the nodes that passed the predicates. It is a batch
// function because the gang view (where the task's siblings are, what of its
// job is still pending) is taken once per task, not once per node.
func (p *plugin) batchNodeOrder(task *schedapi.TaskInfo, nodes []*schedapi.NodeInfo) (map[string]float64, error) {
	if m := p.shared.metrics; m != nil {
		defer m.observe(hookNodeOrder, time.Now())
	}
	r := p.parsed(task)
	if r.err != nil || r.req == nil {
		return nil, nil
	}
	gang := p.gangView(task)
	scores := make(map[string]float64, len(nodes))
	for _, ni := range nodes {
		nf, ok := p.fits[ni.Name]
		if !ok {
			continue
		}
		e := p.fit(r, task.Job, nf, gang)
		if len(e.reasons) > 0 {
			continue
		}
		scores[ni.Name] = p.args.Weight * p.scoreOf(r, nf, e, gang)
	}
	return scores, nil
}

// allocate books the task's GPUs on its node in the session's memory, the
// same set the score saw (the Fit memo's answer for this node state and gang).
// A failure sets event.Err, so Volcano rolls the allocation back instead of
// binding a GPU pod that carries no assignment.
func (p *plugin) allocate(event *framework.Event) {
	if m := p.shared.metrics; m != nil {
		defer m.observe(hookAllocate, time.Now())
	}
	task := event.Task
	defer p.gangEvent(task)
	if pl, ok := p.evicted[task.UID]; ok {
		// An eviction undone (Statement.unevict): the pod never stopped
		// holding the GPUs its assignment records. Book those again; a fresh
		// Fit could choose others and leave its real GPUs looking free.
		delete(p.evicted, task.UID)
		if n, ok := p.nodes[pl.Node]; ok {
			err := placement.Apply(n, pl)
			p.touched(pl.Node)
			if err != nil {
				event.Err = fmt.Errorf("vgpu: rebooking the GPUs of %s/%s: %w", task.Namespace, task.Name, err)
				return
			}
			p.booked[task.UID] = pl
		}
		return
	}
	r := p.parsed(task)
	if r.err != nil {
		event.Err = fmt.Errorf("vgpu: %s/%s allocated with an invalid vGPU request: %w", task.Namespace, task.Name, r.err)
		return
	}
	if r.req == nil {
		return
	}
	nf, ok := p.fits[task.NodeName]
	if !ok {
		event.Err = fmt.Errorf("vgpu: %s/%s allocated to node %s, which has no GPU state", task.Namespace, task.Name, task.NodeName)
		p.log.Error(event.Err, "Refusing the allocation", "pod", klog.KObj(task.Pod))
		return
	}
	n := nf.node
	e := p.fit(r, task.Job, nf, p.gangView(task))
	if len(e.reasons) > 0 {
		event.Err = fmt.Errorf("vgpu: the GPUs of %s/%s no longer fit node %s: %v", task.Namespace, task.Name, task.NodeName, e.reasons)
		p.log.Error(event.Err, "Refusing the allocation", "pod", klog.KObj(task.Pod))
		return
	}
	pl := e.pl.Clone() // e is shared with later readers of the memo
	err := placement.Apply(n, pl)
	p.touched(task.NodeName)
	if err != nil {
		event.Err = fmt.Errorf("vgpu: booking the GPUs of %s/%s: %w", task.Namespace, task.Name, err)
		p.log.Error(err, "Booking GPUs failed", "pod", klog.KObj(task.Pod))
		return
	}
	p.booked[task.UID] = pl
	p.countMultiGPU(r.req, n, pl)
	p.log.V(4).Info("Placed task", "pod", klog.KObj(task.Pod), "node", task.NodeName, "gpus", pl.UUIDs())
}

// deallocate undoes allocate (gang discard, pipelining undone) and releases
// the GPUs of a task being evicted, remembering them in case the eviction is
// undone.
func (p *plugin) deallocate(event *framework.Event) {
	if m := p.shared.metrics; m != nil {
		defer m.observe(hookDeallocate, time.Now())
	}
	task := event.Task
	defer p.gangEvent(task)
	pl, ok := p.booked[task.UID]
	if !ok {
		return
	}
	if n, ok := p.nodes[pl.Node]; ok {
		if err := placement.Release(n, pl); err != nil {
			p.log.Error(err, "Releasing GPUs failed", "pod", klog.KObj(task.Pod))
		}
		p.touched(pl.Node)
	}
	delete(p.booked, task.UID)
	if task.Status == schedapi.Releasing { // Statement.Evict
		p.evicted[task.UID] = pl
	}
	p.log.V(4).Info("Released task", "pod", klog.KObj(task.Pod), "node", pl.Node)
}

// countMultiGPU counts each container of pl holding two or more GPUs by
// whether it got its node's best-linked set (usage aside: node may already
// hold pl).
func (p *plugin) countMultiGPU(req *placement.Request, node *placement.Node, pl placement.Placement) {
	m := p.shared.metrics
	if m == nil {
		return
	}
	var f *placement.Fitter
	for _, c := range pl.Containers {
		if len(c.Devices) < 2 {
			continue
		}
		if f == nil {
			f = p.fitter()
			defer p.fitters.Put(f)
		}
		m.placedMultiGPU(f.BestLinked(req, node, c.Devices))
	}
}
