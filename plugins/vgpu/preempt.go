package vgpu

import (
	"context"
	"errors"
	"fmt"

	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	schedapi "volcano.sh/volcano/pkg/scheduler/api"
	"volcano.sh/volcano/pkg/scheduler/framework"

	"github.com/volcano-vgpu/volcano-vgpu/plugins/placement"
)

// GPU-aware preemption. Volcano's preempt action (with
// enableTopologyAwarePreemption) picks victims on a node by simulation: it
// removes candidate pods one by one until the preemptor's predicates pass,
// then re-adds those it can spare. These hooks give that simulation the GPUs:
// removing a pod frees what its assignment books on each GPU, and the
// predicate is Fit on the GPUs as simulated, so only pods on GPUs the
// preemptor can use are evicted. The simulated usage lives in the cycle
// state Volcano clones per node, never in the session's own state.

// simKey holds the simulated GPU usage in a preemptor's cycle state.
const simKey fwk.StateKey = PluginName + "/simulated-gpus"

// simState is the GPU usage of the nodes a simulation touched.
type simState struct {
	nodes map[string]*placement.Node
}

// Clone deep-copies the simulated nodes (Volcano clones the state per node).
func (s *simState) Clone() fwk.StateData {
	c := &simState{nodes: make(map[string]*placement.Node, len(s.nodes))}
	for name, n := range s.nodes {
		c.nodes[name] = n.Clone()
	}
	return c
}

func (p *plugin) registerSimulation(ssn *framework.Session) {
	ssn.AddSimulateRemoveTaskFn(p.Name(), p.simulateRemove)
	ssn.AddSimulateAddTaskFn(p.Name(), p.simulateAdd)
	ssn.AddSimulatePredicateFn(p.Name(), p.simulatePredicate)
}

// simNode is the node's simulated GPUs in state, created from the session's
// on first use; nil when the node has no GPU state.
func (p *plugin) simNode(state fwk.CycleState, name string) *placement.Node {
	var s *simState
	if d, err := state.Read(simKey); err == nil {
		s, _ = d.(*simState)
	}
	if s == nil {
		s = &simState{nodes: map[string]*placement.Node{}}
		state.Write(simKey, s)
	}
	if n, ok := s.nodes[name]; ok {
		return n
	}
	base, ok := p.nodes[name]
	if !ok {
		return nil
	}
	n := base.Clone()
	s.nodes[name] = n
	return n
}

// simulateRemove frees the GPUs of a candidate victim in the simulation.
func (p *plugin) simulateRemove(_ context.Context, state fwk.CycleState, _ *schedapi.TaskInfo, victim *schedapi.TaskInfo, node *schedapi.NodeInfo) error {
	return p.simulate(state, victim, node, "evicting", placement.Release)
}

// simulateAdd books a reprieved victim's GPUs again in the simulation.
func (p *plugin) simulateAdd(_ context.Context, state fwk.CycleState, _ *schedapi.TaskInfo, task *schedapi.TaskInfo, node *schedapi.NodeInfo) error {
	return p.simulate(state, task, node, "putting back", placement.Apply)
}

// simulate applies change (Release or Apply) with the task's booked GPUs to
// the node's simulated GPUs; a task without GPUs or a node without GPU state
// changes nothing.
func (p *plugin) simulate(state fwk.CycleState, task *schedapi.TaskInfo, node *schedapi.NodeInfo, what string,
	change func(*placement.Node, placement.Placement) error) error {
	pl, ok := p.booked[task.UID]
	if !ok || state == nil {
		return nil
	}
	n := p.simNode(state, node.Name)
	if n == nil {
		return nil
	}
	p.log.V(5).Info("Preemption simulation: "+what, "pod", klog.KObj(task.Pod), "node", node.Name)
	if err := change(n, pl); err != nil {
		return fmt.Errorf("vgpu: simulating %s %s/%s on %s: %w", what, task.Namespace, task.Name, node.Name, err)
	}
	return nil
}

// errNoGPUState: the simulated node has no GPU state for a GPU task.
var errNoGPUState = errors.New("node has no vGPU inventory")

// simulatePredicate: the preemptor fits the node's GPUs as simulated.
func (p *plugin) simulatePredicate(_ context.Context, state fwk.CycleState, task *schedapi.TaskInfo, node *schedapi.NodeInfo) error {
	req, err := p.request(task)
	if err != nil {
		return fmt.Errorf("invalid vGPU request: %w", err)
	}
	if req == nil {
		return nil
	}
	var n *placement.Node
	if state != nil {
		n = p.simNode(state, node.Name)
	} else {
		n = p.nodes[node.Name]
	}
	if n == nil {
		return errNoGPUState
	}
	f := p.fitter()
	defer p.fitters.Put(f)
	p.log.V(5).Info("Preemption simulation", "pod", klog.KObj(task.Pod), "node", node.Name)
	if _, reasons := f.Fit(req, n, nil); len(reasons) > 0 {
		p.log.V(4).Info("Preemption simulation: task does not fit yet", "pod", klog.KObj(task.Pod), "node", node.Name, "reasons", fmt.Sprint(reasons))
		for _, r := range reasons {
			if r.NodeLevel() {
				return fmt.Errorf("vgpu: %s", r.Error())
			}
		}
		return fmt.Errorf("vgpu: %s", reasons[0].Error())
	}
	return nil
}
