// Package view is what `kubectl vgpu` shows: GPU nodes, the pods on their
// GPUs and why a pod is pending, computed from published objects only (the
// device plugin's inventory annotation on each node, the scheduler's
// assignment annotation on each pod, pod conditions and events). The
// inventory, the bookings and the asks are read through package fromapi and
// weighed by the placement core, so the numbers are the scheduler's own.
package view

import (
	"context"
	"fmt"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/volcano-vgpu/volcano-vgpu/api"
	"github.com/volcano-vgpu/volcano-vgpu/plugins/fromapi"
	"github.com/volcano-vgpu/volcano-vgpu/plugins/placement"
)

// Options are the scheduler's settings the view has to assume: they live in
// the scheduler's configuration, which is not a published object.
type Options struct {
	Resources  api.ResourceNames
	Defaults   placement.Defaults
	StaleAfter time.Duration // inventory heartbeat age after which a node gets nothing
	Now        time.Time
}

// DefaultOptions are the scheduler plugin's defaults.
func DefaultOptions(now time.Time) Options {
	return Options{
		Resources:  api.DefaultResourceNames(),
		Defaults:   placement.Defaults{DevicePolicy: api.PolicyBinpack, Topology: api.TopologyPrefer},
		StaleAfter: 3 * time.Minute,
		Now:        now,
	}
}

// gpuNode is one node as the scheduler sees it: its inventory with the
// bookings of the pods assigned there applied.
type gpuNode struct {
	name      string
	node      *placement.Node
	heartbeat time.Time
	err       error // malformed inventory
	policy    api.ComputePolicy
	tenants   map[string][]tenant // by GPU UUID
}

type tenant struct {
	pod       *corev1.Pod
	container string
	share     api.DeviceShare
}

// cluster is every GPU node and every pod with a booking.
type cluster struct {
	nodes  []*gpuNode // by name
	byName map[string]*gpuNode
	pods   []corev1.Pod
	// problems are bookings that could not be applied (a pod booked on a
	// GPU its node no longer publishes, an unreadable assignment).
	problems []string
}

// load lists nodes and pods (all namespaces: a GPU's tenants come from any).
func load(ctx context.Context, client kubernetes.Interface, o Options) (*cluster, error) {
	nodes, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing nodes: %w (kubectl vgpu needs get/list on nodes; see docs/kubectl-vgpu.md for the read-only role)", err)
	}
	pods, err := client.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing pods in all namespaces: %w (kubectl vgpu needs get/list on pods cluster-wide; see docs/kubectl-vgpu.md)", err)
	}
	return build(nodes.Items, pods.Items, o), nil
}

func build(nodes []corev1.Node, pods []corev1.Pod, o Options) *cluster {
	c := &cluster{byName: map[string]*gpuNode{}, pods: pods}
	for i := range nodes {
		n := &nodes[i]
		if _, ok := n.Annotations[api.InventoryKey]; !ok {
			continue
		}
		pn, beat, err := fromapi.Node(n)
		g := &gpuNode{name: n.Name, node: pn, heartbeat: beat, err: err, tenants: map[string][]tenant{}}
		if err == nil {
			pn.Stale = o.Now.Sub(beat) > o.StaleAfter
		}
		if v, ok := n.Annotations[api.ComputePolicyNodeKey]; ok {
			g.policy, _ = api.ParseComputePolicy(api.ComputePolicyNodeKey, v)
		}
		c.nodes = append(c.nodes, g)
		c.byName[n.Name] = g
	}
	sort.Slice(c.nodes, func(i, j int) bool { return c.nodes[i].name < c.nodes[j].name })
	sort.Slice(c.pods, func(i, j int) bool {
		a, b := &c.pods[i], &c.pods[j]
		if a.Namespace != b.Namespace {
			return a.Namespace < b.Namespace
		}
		return a.Name < b.Name
	})
	for i := range c.pods {
		pod := &c.pods[i]
		a, ok, err := booking(pod)
		switch {
		case err != nil:
			c.problems = append(c.problems, fmt.Sprintf("pod %s/%s: %v", pod.Namespace, pod.Name, err))
			continue
		case !ok || terminated(pod):
			continue
		}
		g := c.byName[a.Node]
		if g == nil || g.node == nil {
			continue
		}
		if err := placement.Apply(g.node, fromapi.Placement(a)); err != nil {
			c.problems = append(c.problems, fmt.Sprintf("pod %s/%s on %s: %v", pod.Namespace, pod.Name, a.Node, err))
			continue
		}
		for _, ca := range a.Containers {
			for _, d := range ca.Devices {
				g.tenants[d.UUID] = append(g.tenants[d.UUID], tenant{pod: pod, container: ca.Name, share: d})
			}
		}
	}
	return c
}

// booking is the assignment a pod carries, if it books anything: an
// annotation copied from another pod (other UID) books nothing, as in the
// scheduler and the device plugin.
func booking(pod *corev1.Pod) (api.Assignment, bool, error) {
	v, ok := pod.Annotations[api.AssignmentKey]
	if !ok {
		return api.Assignment{}, false, nil
	}
	a, err := api.DecodeAssignment(v)
	if err != nil {
		return api.Assignment{}, false, err
	}
	if a.PodUID != string(pod.UID) {
		return api.Assignment{}, false, nil
	}
	return a, true, nil
}

func terminated(pod *corev1.Pod) bool {
	return pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed
}

// gpuIndex is the NVML index of uuid on node g, -1 when unknown.
func (g *gpuNode) gpuIndex(uuid string) int {
	if g == nil || g.node == nil {
		return -1
	}
	for _, x := range g.node.GPUs {
		if x.UUID == uuid {
			return x.Index
		}
	}
	return -1
}

// Nodes lists the GPU nodes (see cluster.Nodes).
func Nodes(ctx context.Context, client kubernetes.Interface, o Options) (NodesReport, error) {
	c, err := load(ctx, client, o)
	if err != nil {
		return NodesReport{}, err
	}
	return c.Nodes(), nil
}

// Pods lists the pods of namespace ("" = all) that ask vGPUs or hold a booking.
func Pods(ctx context.Context, client kubernetes.Interface, namespace string, o Options) (PodsReport, error) {
	c, err := load(ctx, client, o)
	if err != nil {
		return PodsReport{}, err
	}
	return c.Pods(namespace, o), nil
}
