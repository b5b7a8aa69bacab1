package vgpu

import (
	"fmt"
	"sort"
	"testing"

	corev1 "k8s.io/api/core/v1"
	schedulingv1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"
	"volcano.sh/volcano/pkg/scheduler/uthelper"
	"volcano.sh/volcano/pkg/scheduler/util"

	"github.com/volcano-vgpu/volcano-vgpu/api"
)

func TestSessionGangOnNVLinkPairs(t *testing.T) {
	pg := util.BuildPodGroup("pg1", "ns", "q1", 4, nil, schedulingv1beta1.PodGroupInqueue)
	var pods []*corev1.Pod
	binds := map[string]string{}
	for i := 0; i < 4; i++ {
		name := fmt.Sprintf("w%d", i)
		pods = append(pods, gpuPod("ns", name, "pg1", 2, 8192, 50))
		binds["ns/"+name] = "pairs"
	}
	runSession(t, sessionCase{
		TestCommonStruct: uthelper.TestCommonStruct{
			Name:  "4 tasks × 2 GPUs on an NVLink-pairs node",
			Nodes: []*corev1.Node{newGPUNode("pairs", "A100-40GB", 8, 40960).nvlinkPairs().obj(t)},
			Pods:  pods, PodGroups: []*schedulingv1beta1.PodGroup{pg},
			ExpectBindMap: binds, ExpectBindsNum: 4,
		},
		check: func(t *testing.T, r *sessionRun) {
			as := assignments(t, r, "ns")
			if len(as) != 4 {
				t.Fatalf("%d pods carry an assignment, want 4", len(as))
			}
			perGPU := map[string]int{}
			for name, a := range as {
				d := a.Containers[0].Devices
				if len(d) != 2 {
					t.Fatalf("%s: %d GPUs, want 2", name, len(d))
				}
				// Pairs are (GPU-pairs-0, GPU-pairs-1), (…-2, …-3): same pair ⇔ index/2 equal.
				var i, j int
				fmt.Sscanf(d[0].UUID, "GPU-pairs-%d", &i)
				fmt.Sscanf(d[1].UUID, "GPU-pairs-%d", &j)
				if i/2 != j/2 {
					t.Errorf("%s got %s and %s: not an NVLink pair", name, d[0].UUID, d[1].UUID)
				}
				for _, x := range d {
					perGPU[x.UUID] += x.Cores
				}
			}
			for uuid, cores := range perGPU {
				if cores > 100 {
					t.Errorf("%s booked %d%% cores", uuid, cores)
				}
			}
		},
	})
}

func TestSessionGangThatCannotFitLeavesNothing(t *testing.T) {
	// 3 tasks × 8 whole GPUs exclusive on one 8-GPU node: only one fits, the
	// gang needs all three, so nothing is bound and nothing annotated.
	pg := util.BuildPodGroup("pg1", "ns", "q1", 3, nil, schedulingv1beta1.PodGroupInqueue)
	var pods []*corev1.Pod
	for i := 0; i < 3; i++ {
		pods = append(pods, gpuPod("ns", fmt.Sprintf("w%d", i), "pg1", 8, 1024, 100))
	}
	runSession(t, sessionCase{
		TestCommonStruct: uthelper.TestCommonStruct{
			Name:  "gang too big",
			Nodes: []*corev1.Node{newGPUNode("n1", "A100-80GB", 8, 81920).obj(t)},
			Pods:  pods, PodGroups: []*schedulingv1beta1.PodGroup{pg},
			ExpectBindMap: map[string]string{}, ExpectBindsNum: 0,
		},
		check: func(t *testing.T, r *sessionRun) {
			if as := assignments(t, r, "ns"); len(as) != 0 {
				t.Errorf("pods of a discarded gang carry assignments: %v", keys(as))
			}
		},
	})
}

func TestSessionRespectsExistingAssignments(t *testing.T) {
	// A running pod holds GPU 0 exclusively (from an earlier session); a new
	// exclusive 1-GPU pod must get another GPU.
	node := newGPUNode("n1", "L4", 2, 23034)
	running := gpuPod("ns", "old", "pg0", 1, 23034, 100)
	running.Spec.NodeName = "n1"
	running.Status.Phase = corev1.PodRunning
	old, _ := api.EncodeAssignment(api.Assignment{PodUID: string(running.UID), Node: "n1", Time: testNow, Phase: api.PhaseAllocated,
		Containers: []api.ContainerAssignment{{Name: running.Spec.Containers[0].Name, Devices: []api.DeviceShare{{UUID: "GPU-n1-0", MemoryMiB: 23034, Cores: 100}}}}})
	running.Annotations = map[string]string{api.AssignmentKey: old}
	pgs := []*schedulingv1beta1.PodGroup{
		util.BuildPodGroup("pg0", "ns", "q1", 1, nil, schedulingv1beta1.PodGroupRunning),
		util.BuildPodGroup("pg1", "ns", "q1", 1, nil, schedulingv1beta1.PodGroupInqueue),
	}
	runSession(t, sessionCase{
		TestCommonStruct: uthelper.TestCommonStruct{
			Name:  "existing assignment is booked",
			Nodes: []*corev1.Node{node.obj(t)},
			Pods:  []*corev1.Pod{running, gpuPod("ns", "new", "pg1", 1, 1024, 100)}, PodGroups: pgs,
			ExpectBindMap: map[string]string{"ns/new": "n1"}, ExpectBindsNum: 1,
		},
		check: func(t *testing.T, r *sessionRun) {
			a := assignments(t, r, "ns")["new"]
			if got := a.Containers[0].Devices[0].UUID; got != "GPU-n1-1" {
				t.Errorf("new pod got %s, want GPU-n1-1 (GPU-n1-0 is held exclusively)", got)
			}
		},
	})
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
