package view

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/volcano-vgpu/volcano-vgpu/api"
)

var t0 = time.Date(2026, 11, 26, 6, 0, 0, 0, time.UTC)

// nodeB builds a node with an inventory annotation.
type nodeB struct {
	t   *testing.T
	n   corev1.Node
	inv api.Inventory
}

func node(t *testing.T, name string) *nodeB {
	return &nodeB{t: t, n: corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{}}},
		inv: api.Inventory{Heartbeat: t0}}
}

func (b *nodeB) gpu(uuid, model string, memMiB int64, maxShares int) *nodeB {
	b.inv.GPUs = append(b.inv.GPUs, api.GPU{Index: len(b.inv.GPUs), UUID: uuid, Model: model, MemoryMiB: memMiB, Healthy: true, MaxShares: maxShares})
	return b
}

func (b *nodeB) unhealthy(i int) *nodeB       { b.inv.GPUs[i].Healthy = false; return b }
func (b *nodeB) heartbeat(t time.Time) *nodeB { b.inv.Heartbeat = t; return b }
func (b *nodeB) annotate(k, v string) *nodeB  { b.n.Annotations[k] = v; return b }

func (b *nodeB) obj() *corev1.Node {
	b.t.Helper()
	if len(b.inv.GPUs) > 0 {
		n := len(b.inv.GPUs)
		b.inv.NVLinks, b.inv.PCIe = make([][]int, n), make([][]api.PCIeLevel, n)
		for i := range n {
			b.inv.NVLinks[i], b.inv.PCIe[i] = make([]int, n), make([]api.PCIeLevel, n)
			for j := range n {
				if i != j {
					b.inv.PCIe[i][j] = api.PCIeHostBridge
				}
			}
		}
		v, err := api.EncodeInventory(b.inv)
		if err != nil {
			b.t.Fatal(err)
		}
		b.n.Annotations[api.InventoryKey] = v
	}
	return &b.n
}

// podB builds a pod with vGPU asks and, optionally, an assignment.
type podB struct {
	t *testing.T
	p corev1.Pod
	a *api.Assignment
}

func pod(t *testing.T, ns, name string) *podB {
	return &podB{t: t, p: corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-" + name), Annotations: map[string]string{}},
		Status:     corev1.PodStatus{Phase: corev1.PodPending},
	}}
}

// container asks n GPUs of memMiB and cores each (0: not asked).
func (b *podB) container(name string, n int, memMiB int64, cores int) *podB {
	names := api.DefaultResourceNames()
	l := corev1.ResourceList{corev1.ResourceName(names.Number): resource.MustParse(fmt.Sprint(n))}
	if memMiB > 0 {
		l[corev1.ResourceName(names.Memory)] = resource.MustParse(fmt.Sprint(memMiB))
	}
	if cores > 0 {
		l[corev1.ResourceName(names.Cores)] = resource.MustParse(fmt.Sprint(cores))
	}
	b.p.Spec.Containers = append(b.p.Spec.Containers, corev1.Container{Name: name, Resources: corev1.ResourceRequirements{Limits: l}})
	return b
}

func (b *podB) plain(name string) *podB {
	b.p.Spec.Containers = append(b.p.Spec.Containers, corev1.Container{Name: name})
	return b
}

// on books the pod's container on node: uuid, memory, cores.
func (b *podB) on(node, container, uuid string, memMiB int64, cores int) *podB {
	if b.a == nil {
		b.a = &api.Assignment{PodUID: string(b.p.UID), Node: node, Time: t0, Phase: api.PhaseAssigned}
		b.p.Spec.NodeName = node
		b.p.Status.Phase = corev1.PodRunning
	}
	for i := range b.a.Containers {
		if b.a.Containers[i].Name == container {
			b.a.Containers[i].Devices = append(b.a.Containers[i].Devices, api.DeviceShare{UUID: uuid, MemoryMiB: memMiB, Cores: cores})
			return b
		}
	}
	b.a.Containers = append(b.a.Containers, api.ContainerAssignment{Name: container, Devices: []api.DeviceShare{{UUID: uuid, MemoryMiB: memMiB, Cores: cores}}})
	return b
}

func (b *podB) uid(u string) *podB            { b.p.UID = types.UID(u); return b }
func (b *podB) phase(p corev1.PodPhase) *podB { b.p.Status.Phase = p; return b }
func (b *podB) annotate(k, v string) *podB    { b.p.Annotations[k] = v; return b }
func (b *podB) unschedulable(msg string) *podB {
	b.p.Status.Conditions = append(b.p.Status.Conditions, corev1.PodCondition{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable, Message: msg})
	return b
}

func (b *podB) obj() *corev1.Pod {
	b.t.Helper()
	if b.a != nil {
		v, err := api.EncodeAssignment(*b.a)
		if err != nil {
			b.t.Fatal(err)
		}
		b.p.Annotations[api.AssignmentKey] = v
	}
	return &b.p
}

func event(ns, pod, uid, reason, component, msg string, at time.Time) *corev1.Event {
	return &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Namespace: ns, Name: pod + "." + reason},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: pod, UID: types.UID(uid)},
		Reason:         reason, Message: msg, Type: corev1.EventTypeWarning, Count: 3,
		Source:        corev1.EventSource{Component: component},
		LastTimestamp: metav1.Time{Time: at},
	}
}
