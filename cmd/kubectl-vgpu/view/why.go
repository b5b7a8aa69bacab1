package view

import (
	"context"
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/volcano-vgpu/volcano-vgpu/plugins/fromapi"
	"github.com/volcano-vgpu/volcano-vgpu/plugins/placement"
)

// Verdicts of `kubectl vgpu why`.
const (
	VerdictAssigned = "assigned"    // the pod holds a booking
	VerdictPending  = "pending"     // it asks vGPUs and holds none
	VerdictNoAsk    = "no-vgpu"     // it asks no vGPU
	VerdictBadAsk   = "invalid-ask" // its ask or annotations cannot be read
	VerdictDone     = "terminated"  // it ran to its end
)

// NodeVerdict is why one GPU node cannot take the pod now ("" Reasons: it can).
type NodeVerdict struct {
	Node    string   `json:"node"`
	Fits    bool     `json:"fits"`
	Reasons []string `json:"reasons,omitempty"`
}

// WhyReport is `kubectl vgpu why POD`.
type WhyReport struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Phase     string `json:"phase"`
	Verdict   string `json:"verdict"`
	Node      string `json:"node,omitempty"`
	Detail    string `json:"detail,omitempty"`
	// Scheduler is what the scheduler said: the PodScheduled condition's
	// message and the pod's scheduling events, newest last.
	Scheduler []string `json:"scheduler,omitempty"`
	// Nearest is the GPU that came nearest to fitting, with the numbers, as
	// the placement core sees the published inventory and bookings now.
	Nearest string        `json:"nearest,omitempty"`
	Nodes   []NodeVerdict `json:"nodes,omitempty"`
	// NoInventory counts the nodes that publish no GPU inventory.
	NoInventory int `json:"nodesWithoutInventory"`
}

// Why explains pod: its booking, or why it has none, from its conditions and
// events and from fitting its ask to every GPU node's published inventory
// minus the bookings on it. The last part holds also when Volcano's own
// resource check refused the pod before the vGPU plugin saw it ("Insufficient
// volcano.sh/vgpu-memory"), a message that names no GPU.
func Why(ctx context.Context, client kubernetes.Interface, namespace, name string, o Options) (WhyReport, error) {
	pod, err := client.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return WhyReport{}, fmt.Errorf("pod %s/%s: %w", namespace, name, err)
	}
	c, err := load(ctx, client, o)
	if err != nil {
		return WhyReport{}, err
	}
	allNodes, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return WhyReport{}, fmt.Errorf("listing nodes: %w", err)
	}
	events, err := client.CoreV1().Events(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return WhyReport{}, fmt.Errorf("listing events in %s: %w (kubectl vgpu needs list on events)", namespace, err)
	}
	r := c.why(pod, o)
	r.NoInventory = len(allNodes.Items) - len(c.nodes)
	r.Scheduler = schedulerSays(pod, events.Items)
	return r, nil
}

func (c *cluster) why(pod *corev1.Pod, o Options) WhyReport {
	r := WhyReport{Namespace: pod.Namespace, Name: pod.Name, Phase: string(pod.Status.Phase)}
	a, booked, err := booking(pod)
	switch {
	case err != nil:
		r.Verdict, r.Detail = VerdictBadAsk, err.Error()
		return r
	case terminated(pod):
		r.Verdict = VerdictDone
		return r
	case booked:
		r.Verdict, r.Node = VerdictAssigned, a.Node
		row, _ := c.podRow(pod, o)
		var parts []string
		for _, ct := range row.Containers {
			for _, d := range ct.Devices {
				parts = append(parts, fmt.Sprintf("container %q: GPU %d %s, %d MiB, %d%% cores", ct.Name, d.Index, d.UUID, d.MemoryMiB, d.Cores))
			}
		}
		r.Detail = strings.Join(parts, "; ")
		return r
	}
	req, _, err := fromapi.Request(pod, o.Resources, o.Defaults)
	switch {
	case err != nil:
		r.Verdict, r.Detail = VerdictBadAsk, err.Error()
		return r
	case req == nil:
		r.Verdict = VerdictNoAsk
		return r
	}
	r.Verdict = VerdictPending
	var closest placement.Closest
	var f placement.Fitter
	for _, g := range c.nodes {
		v := NodeVerdict{Node: g.name}
		if g.err != nil {
			v.Reasons = []string{"unreadable inventory: " + g.err.Error()}
			r.Nodes = append(r.Nodes, v)
			continue
		}
		_, reasons := f.Fit(req, g.node, nil)
		if len(reasons) == 0 {
			v.Fits = true
		}
		closest.Add(g.name, reasons)
		for _, x := range reasons {
			if x.NodeLevel() {
				v.Reasons = append(v.Reasons, x.Error())
			}
		}
		r.Nodes = append(r.Nodes, v)
	}
	r.Nearest = closest.String()
	return r
}

// schedulerSays is the PodScheduled condition's message (when the pod is
// not scheduled) and the messages of the pod's warning events, oldest first.
func schedulerSays(pod *corev1.Pod, events []corev1.Event) []string {
	var out []string
	for _, cond := range pod.Status.Conditions {
		if cond.Type == corev1.PodScheduled && cond.Status != corev1.ConditionTrue && cond.Message != "" {
			out = append(out, fmt.Sprintf("condition %s=%s (%s): %s", cond.Type, cond.Status, cond.Reason, cond.Message))
		}
	}
	var mine []corev1.Event
	for _, e := range events {
		io := e.InvolvedObject
		if io.Kind == "Pod" && io.Name == pod.Name && (io.UID == "" || io.UID == pod.UID) && e.Type == corev1.EventTypeWarning {
			mine = append(mine, e)
		}
	}
	sort.SliceStable(mine, func(i, j int) bool { return eventTime(mine[i]).Time.Before(eventTime(mine[j]).Time) })
	for _, e := range mine {
		out = append(out, fmt.Sprintf("event %s (%s, x%d): %s", e.Reason, eventSource(e), max(e.Count, 1), e.Message))
	}
	return out
}

func eventTime(e corev1.Event) metav1.Time {
	if !e.LastTimestamp.IsZero() {
		return e.LastTimestamp
	}
	if !e.EventTime.IsZero() {
		return metav1.Time{Time: e.EventTime.Time}
	}
	return e.FirstTimestamp
}

func eventSource(e corev1.Event) string {
	if e.Source.Component != "" {
		return e.Source.Component
	}
	if e.ReportingController != "" {
		return e.ReportingController
	}
	return "unknown"
}

func (r WhyReport) text() string {
	var b strings.Builder
	fmt.Fprintf(&b, "Pod %s/%s (%s): %s\n", r.Namespace, r.Name, r.Phase, r.Verdict)
	switch r.Verdict {
	case VerdictAssigned:
		fmt.Fprintf(&b, "Assigned to %s: %s\n", r.Node, r.Detail)
		return b.String()
	case VerdictBadAsk:
		fmt.Fprintf(&b, "Its vGPU ask cannot be read: %s\n", r.Detail)
		return b.String()
	case VerdictNoAsk, VerdictDone:
		return b.String()
	}
	if len(r.Scheduler) > 0 {
		b.WriteString("The scheduler says:\n")
		for _, s := range r.Scheduler {
			fmt.Fprintf(&b, "  %s\n", s)
		}
	}
	fits := 0
	for _, v := range r.Nodes {
		if v.Fits {
			fits++
		}
	}
	fmt.Fprintf(&b, "From the published inventory and bookings (%s, %s without an inventory):\n", count(len(r.Nodes), "GPU node"), count(r.NoInventory, "node"))
	switch {
	case fits > 0:
		fmt.Fprintf(&b, "  fits now on %s; a wait here is the queue, the gang or a resource other than GPUs\n", count(fits, "node"))
	case r.Nearest != "":
		fmt.Fprintf(&b, "  nearest: %s\n", r.Nearest)
	}
	for _, v := range r.Nodes {
		if v.Fits {
			fmt.Fprintf(&b, "  %s: fits\n", v.Node)
			continue
		}
		fmt.Fprintf(&b, "  %s: %s\n", v.Node, strings.Join(v.Reasons, "; "))
	}
	return b.String()
}

func count(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}
