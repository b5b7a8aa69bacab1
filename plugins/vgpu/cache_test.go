package vgpu

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"

	"github.com/volcano-vgpu/volcano-vgpu/api"
	"github.com/volcano-vgpu/volcano-vgpu/plugins/placement"
)

func TestDecodeCacheNodes(t *testing.T) {
	c := newDecodeCache()
	node := newGPUNode("n1", "L4", 2, 23034).obj(t)
	a, err := c.node(node, testNow, time.Minute)
	if err != nil || a == nil || a.Stale {
		t.Fatalf("first decode: %+v, %v", a, err)
	}
	a.GPUs[0].UsedMemoryMiB = 1000 // a session books on its copy
	b, _ := c.node(node, testNow.Add(2*time.Minute), time.Minute)
	if b.GPUs[0].UsedMemoryMiB != 0 {
		t.Error("a session's usage leaked into the cache")
	}
	if !b.Stale {
		t.Error("staleness not recomputed for the session's time (heartbeat 2m old, staleAfter 1m)")
	}
	changed := newGPUNode("n1", "L4", 4, 23034).obj(t) // new text: decoded again
	if d, _ := c.node(changed, testNow, time.Minute); len(d.GPUs) != 4 {
		t.Errorf("changed inventory: %d GPUs, want 4", len(d.GPUs))
	}
}

func TestDecodeCacheAssignments(t *testing.T) {
	c := newDecodeCache()
	pod := newPod("ns", "p").gpus(1, 1024, 10).on("n1", corev1.PodRunning).
		assigned(t, api.DeviceShare{UUID: "GPU-n1-0", MemoryMiB: 1024, Cores: 10}).obj()
	value := pod.Annotations[api.AssignmentKey]
	want := placement.Placement{Node: "n1", Containers: []placement.ContainerPlacement{
		{Name: "main", Devices: []placement.Device{{Pos: -1, UUID: "GPU-n1-0", MemoryMiB: 1024, Cores: 10}}},
	}}
	for i := range 2 { // decoded, then cached
		pl, uid, err := c.assignment(pod.UID, value)
		if err != nil || uid != "ns-p" {
			t.Fatalf("call %d: uid %q, err %v", i, uid, err)
		}
		if d := cmp.Diff(want, pl); d != "" {
			t.Errorf("call %d (-want +got):\n%s", i, d)
		}
	}
	moved := assignmentOf(pod, api.DeviceShare{UUID: "GPU-n1-1", MemoryMiB: 1024, Cores: 10})
	newValue, err := api.EncodeAssignment(moved)
	if err != nil {
		t.Fatal(err)
	}
	if pl, _, _ := c.assignment(pod.UID, newValue); pl.UUIDs()[0] != "GPU-n1-1" {
		t.Errorf("changed annotation served from the cache: %v", pl.UUIDs())
	}
	if _, _, err := c.assignment(pod.UID, "{"); err == nil {
		t.Error("malformed annotation accepted")
	}

	// An entry not used during a session is dropped at its close.
	c.sweep()
	c.sweep()
	if len(c.pods) != 0 {
		t.Errorf("%d pod entries survive a session that did not use them", len(c.pods))
	}
}

func TestCopiedAssignmentBooksNothing(t *testing.T) {
	// A pod created from another pod's manifest carries its assignment: the
	// UID in the payload is not its own, so it books nothing.
	orig := newPod("ns", "orig").gpus(1, 1024, 10).on("n1", corev1.PodRunning).
		assigned(t, api.DeviceShare{UUID: "GPU-n1-0", MemoryMiB: 1024, Cores: 10}).obj()
	copied := newPod("ns", "copy").gpus(1, 1024, 10).on("n1", corev1.PodRunning).
		annotate(api.AssignmentKey, orig.Annotations[api.AssignmentKey]).obj()
	h := newHandSession(t, nil, DefaultArgs(), []*corev1.Node{newGPUNode("n1", "L4", 2, 23034).obj(t)}, []*corev1.Pod{orig, copied})
	if got := keys(mapKeys(h.plugin.booked)); !cmp.Equal(got, []string{"ns-orig"}) {
		t.Errorf("booked %v, want only ns-orig", got)
	}
}
