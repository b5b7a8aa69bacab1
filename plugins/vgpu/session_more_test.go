package vgpu

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	schedulingv1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"
	schedapi "volcano.sh/volcano/pkg/scheduler/api"
	"volcano.sh/volcano/pkg/scheduler/uthelper"

	"github.com/volcano-vgpu/volcano-vgpu/api"
	"github.com/volcano-vgpu/volcano-vgpu/plugins/placement"
)

// twoSmallPods are two 1-GPU pods of separate jobs: 8192 MiB, 25% each, so
// four of them fit one GPU.
func twoSmallPods(annotations map[string]string) ([]*corev1.Pod, []*schedulingv1beta1.PodGroup) {
	var pods []*corev1.Pod
	var pgs []*schedulingv1beta1.PodGroup
	for i := range 2 {
		b := newPod("ns", fmt.Sprintf("p%d", i)).group(fmt.Sprintf("pg%d", i)).gpus(1, 8192, 25)
		for k, v := range annotations {
			b.annotate(k, v)
		}
		pods = append(pods, b.obj())
		pgs = append(pgs, podGroup(fmt.Sprintf("pg%d", i), 1))
	}
	return pods, pgs
}

func TestSessionDevicePolicy(t *testing.T) {
	spreadArgs := map[string]any{argDevicePolicy: "spread"}
	spreadAnno := map[string]string{api.DevicePolicyKey: "spread"}
	tests := []struct {
		name    string
		args    map[string]any
		anno    map[string]string
		sameGPU bool
	}{
		{name: "binpack (default) stacks both pods on one GPU", sameGPU: true}, // 2 × 8192 MiB, 2 × 25% on one 80 GB GPU
		{name: "spread argument uses two GPUs", args: spreadArgs},
		{name: "spread annotation uses two GPUs", anno: spreadAnno},
		{name: "binpack annotation overrides the spread argument", args: spreadArgs, anno: map[string]string{api.DevicePolicyKey: "binpack"}, sameGPU: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pods, pgs := twoSmallPods(tc.anno)
			runSession(t, sessionCase{
				TestCommonStruct: uthelper.TestCommonStruct{
					Name:  tc.name,
					Nodes: []*corev1.Node{newGPUNode("n1", "A100-80GB", 4, 81920).obj(t)},
					Pods:  pods, PodGroups: pgs,
					ExpectBindMap: map[string]string{"ns/p0": "n1", "ns/p1": "n1"}, ExpectBindsNum: 2,
				},
				args: tc.args,
				check: func(t *testing.T, r *sessionRun) {
					as := assignments(t, r, "ns")
					g0, g1 := uuids(as["p0"]), uuids(as["p1"])
					if len(g0) != 1 || len(g1) != 1 {
						t.Fatalf("assignments %v %v, want one GPU each", g0, g1)
					}
					if same := g0[0] == g1[0]; same != tc.sameGPU {
						t.Errorf("p0 on %s, p1 on %s: same GPU = %t, want %t", g0[0], g1[0], same, tc.sameGPU)
					}
				},
			})
		})
	}
}

func TestSessionNodePolicy(t *testing.T) {
	tests := []struct {
		name     string
		args     map[string]any
		anno     map[string]string
		sameNode bool
	}{
		{name: "binpack (default) stacks both pods on one node", sameNode: true},
		{name: "spread argument uses both nodes", args: map[string]any{argNodePolicy: "spread"}},
		{name: "spread annotation uses both nodes", anno: map[string]string{api.NodePolicyKey: "spread"}},
		{name: "binpack annotation overrides the spread argument", args: map[string]any{argNodePolicy: "spread"},
			anno: map[string]string{api.NodePolicyKey: "binpack"}, sameNode: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pods, pgs := twoSmallPods(tc.anno)
			runSession(t, sessionCase{
				TestCommonStruct: uthelper.TestCommonStruct{
					Name: tc.name,
					Nodes: []*corev1.Node{
						newGPUNode("n1", "A100-80GB", 2, 81920).obj(t), newGPUNode("n2", "A100-80GB", 2, 81920).obj(t),
					},
					Pods: pods, PodGroups: pgs,
					// The first pod's node is a tie, chosen at random by Volcano: count binds only.
					ExpectBindsNum: 2, MinimalBindCheck: true,
				},
				args: tc.args,
				check: func(t *testing.T, r *sessionRun) {
					as := assignments(t, r, "ns")
					n0, n1 := as["p0"].Node, as["p1"].Node
					if n0 == "" || n1 == "" {
						t.Fatalf("pods not assigned: %v", keys(as))
					}
					if same := n0 == n1; same != tc.sameNode {
						t.Errorf("p0 on %s, p1 on %s: same node = %t, want %t", n0, n1, same, tc.sameNode)
					}
				},
			})
		})
	}
}

func TestSessionGPUFilters(t *testing.T) {
	tests := []struct {
		name     string
		anno     map[string]string
		wantNode string
		wantGPU  string // "" = any GPU of wantNode
	}{
		{name: "type include", anno: map[string]string{api.GPUTypeIncludeKey: "L4"}, wantNode: "l4"},
		{name: "type exclude", anno: map[string]string{api.GPUTypeExcludeKey: "a100"}, wantNode: "l4"}, // case-insensitive substring
		{name: "type include and exclude", anno: map[string]string{api.GPUTypeIncludeKey: "NVIDIA", api.GPUTypeExcludeKey: "L4"}, wantNode: "a100"},
		{name: "deviceshare use-gputype", anno: map[string]string{api.DeviceShareTypeIncludeKey: "L4"}, wantNode: "l4"},
		{name: "deviceshare nouse-gputype", anno: map[string]string{api.DeviceShareTypeExcludeKey: "A100"}, wantNode: "l4"},
		{name: "UUID include", anno: map[string]string{api.GPUUUIDIncludeKey: "GPU-l4-1"}, wantNode: "l4", wantGPU: "GPU-l4-1"},
		{name: "UUID exclude", anno: map[string]string{api.GPUUUIDExcludeKey: "GPU-a100-0,GPU-a100-1,GPU-l4-0"}, wantNode: "l4", wantGPU: "GPU-l4-1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { bindsOneGPU(t, tc.name, tc.anno, tc.wantNode, tc.wantGPU) })
	}
}

func TestSessionImpossibleRequest(t *testing.T) {
	tests := []struct {
		name        string
		pod         *podBuilder
		want        string // in Volcano's recorded fit error
		wantNearest string // in it once the session closed, and in the PodGroup's condition
	}{
		{name: "more memory than any GPU has", pod: newPod("ns", "p").group("pg").gpus(1, 204800, 10),
			want:        `1 container "main": no GPU with 204800 MiB free`, // 200 GiB on 80 GiB GPUs
			wantNearest: `0/1 nodes are unavailable; nearest: n1 GPU-n1-0 (A100-80GB): 81920 MiB free, container "main" asks 204800 MiB: 1 container "main": no GPU with 204800 MiB free.`},
		{name: "more GPUs than the node has", pod: newPod("ns", "p").group("pg").gpus(8, 1024, 10),
			want: `1 container "main": needs 8 healthy GPUs, has fewer.`},
		{name: "malformed annotation", pod: newPod("ns", "p").group("pg").gpus(1, 1024, 10).annotate(api.TopologyKey, "nvlink"),
			want: "1 invalid vGPU request: " + api.TopologyKey + ": expected one of prefer, required, none"},
		{name: "unknown annotation", pod: newPod("ns", "p").group("pg").gpus(1, 1024, 10).annotate(api.Prefix+"gpu-type", "A100"),
			want: "1 invalid vGPU request: " + api.Prefix + "gpu-type"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pod := tc.pod.obj()
			var fe *schedapi.FitErrors
			var job *schedapi.JobInfo
			runSession(t, sessionCase{
				TestCommonStruct: uthelper.TestCommonStruct{
					Name:  tc.name,
					Nodes: []*corev1.Node{newGPUNode("n1", "A100-80GB", 4, 81920).obj(t)},
					Pods:  []*corev1.Pod{pod}, PodGroups: []*schedulingv1beta1.PodGroup{podGroup("pg", 1)},
					ExpectBindMap: map[string]string{}, ExpectBindsNum: 0,
				},
				check: func(t *testing.T, r *sessionRun) {
					if as := assignments(t, r, "ns"); len(as) != 0 {
						t.Errorf("assignments written: %v", keys(as))
					}
					msg := fitError(t, r.ssn, pod)
					if !strings.Contains(msg, tc.want) {
						t.Errorf("fit error %q lacks %q", msg, tc.want)
					}
					job = r.ssn.Jobs[schedapi.JobID("ns/pg")]
					fe = job.NodesFitErrors[schedapi.TaskID(pod.UID)]
				},
				afterClose: func(t *testing.T) {
					msg := fe.Error()
					if tc.wantNearest == "" {
						if strings.Contains(msg, "nearest") {
							t.Errorf("fit error %q names a nearest GPU for a refusal no eviction or GPU comes near", msg)
						}
						return
					}
					if msg != tc.wantNearest {
						t.Errorf("fit error after close:\n got %q\nwant %q", msg, tc.wantNearest)
					}
					var cond string
					for _, c := range job.PodGroup.Status.Conditions {
						cond += c.Message
					}
					if !strings.Contains(cond, tc.wantNearest) {
						t.Errorf("PodGroup conditions %q lack %q", cond, tc.wantNearest)
					}
				},
			})
		})
	}
}

func TestSessionRestartNeverDoubleBooks(t *testing.T) {
	// A fresh scheduler process (empty decode cache) opens a session on a
	// 4 × L4 node (23034 MiB each) where GPU 0 is held exclusively by a
	// running pod (annotation) and GPU 1 by a pod this process bound moments
	// ago whose annotated copy the informer has not delivered (Inflight).
	// Three new pods ask 12000 MiB each: GPUs 2 and 3 take one each
	// (23034 − 12000 = 11034 left), the third fits nowhere. Volcano's own
	// node accounting would admit all three (2 × 23034 + 3 × 12000 ≤ 4 × 23034),
	// so only the plugin's rebuilt state can refuse it.
	const node = "n1"
	whole := func(i int) api.DeviceShare {
		return api.DeviceShare{UUID: fmt.Sprintf("GPU-n1-%d", i), MemoryMiB: 23034, Cores: 100}
	}
	running := newPod("ns", "running").group("old").gpus(1, 23034, 100).on(node, corev1.PodRunning).assigned(t, whole(0)).obj()
	bound := newPod("ns", "bound").group("old").gpus(1, 23034, 100).on(node, corev1.PodPending).obj()
	shared := NewShared(func() time.Time { return testNow })
	inFlight := assignmentOf(bound, whole(1))
	value, err := api.EncodeAssignment(inFlight)
	if err != nil {
		t.Fatal(err)
	}
	shared.Inflight.Put(bound.UID, inFlight, value)

	pods := []*corev1.Pod{running, bound}
	pgs := []*schedulingv1beta1.PodGroup{runningGroup("old", 2)}
	for i := range 3 {
		pods = append(pods, gpuPod("ns", fmt.Sprintf("new%d", i), fmt.Sprintf("pg%d", i), 1, 12000, 30))
		pgs = append(pgs, podGroup(fmt.Sprintf("pg%d", i), 1))
	}
	runSession(t, sessionCase{
		TestCommonStruct: uthelper.TestCommonStruct{
			Name:  "restart",
			Nodes: []*corev1.Node{newGPUNode(node, "NVIDIA L4", 4, 23034).obj(t)},
			Pods:  pods, PodGroups: pgs,
			ExpectBindsNum: 2, MinimalBindCheck: true, // which two of the three identical pods is Volcano's choice
		},
		shared: shared,
		check: func(t *testing.T, r *sessionRun) {
			var got []string
			var refused *corev1.Pod
			for _, p := range pods[2:] {
				a, ok := assignments(t, r, "ns")[p.Name]
				if !ok {
					refused = p
					continue
				}
				got = append(got, uuids(a)...)
			}
			slices.Sort(got)
			if d := cmp.Diff([]string{"GPU-n1-2", "GPU-n1-3"}, got); d != "" {
				t.Errorf("new pods' GPUs (-want +got):\n%s", d)
			}
			if refused == nil {
				t.Fatal("all three new pods were assigned")
			}
			if msg := fitError(t, r.ssn, refused); !strings.Contains(msg, "no GPU with 12000 MiB free") {
				t.Errorf("fit error of %s = %q, want the plugin's memory reason", refused.Name, msg)
			}
			if _, ok := shared.Inflight.Get(bound.UID); !ok {
				t.Error("the in-flight entry of the bound pod was dropped before its annotation was seen")
			}
		},
	})
}

func runningGroup(name string, minMember int32) *schedulingv1beta1.PodGroup {
	pg := podGroup(name, minMember)
	pg.Status.Phase = schedulingv1beta1.PodGroupRunning
	return pg
}

func TestSessionInventoryProblems(t *testing.T) {
	gpu := func() *corev1.Pod { return gpuPod("ns", "gpu", "pg", 1, 1024, 10) }
	t.Run("stale, malformed and missing inventories get no GPU pod", func(t *testing.T) {
		pod := gpu()
		runSession(t, sessionCase{
			TestCommonStruct: uthelper.TestCommonStruct{
				Name: "inventory problems",
				Nodes: []*corev1.Node{
					newGPUNode("stale", "A100-80GB", 2, 81920).heartbeat(testNow.Add(-10 * time.Minute)).obj(t), // staleAfter 3m
					newGPUNode("broken", "A100-80GB", 2, 81920).rawInventory(`{"version":"v0"}`).obj(t),
					newGPUNode("bare", "A100-80GB", 2, 81920).noInventory().obj(t),
				},
				Pods: []*corev1.Pod{pod}, PodGroups: []*schedulingv1beta1.PodGroup{podGroup("pg", 1)},
				ExpectBindMap: map[string]string{}, ExpectBindsNum: 0,
			},
			check: func(t *testing.T, r *sessionRun) {
				msg := fitError(t, r.ssn, pod)
				for _, want := range []string{"1 inventory stale", "1 node GPU inventory is malformed", "1 node has no vGPU inventory"} {
					if !strings.Contains(msg, want) {
						t.Errorf("fit error %q lacks %q", msg, want)
					}
				}
			},
		})
	})
	t.Run("a node without inventory still takes CPU pods", func(t *testing.T) {
		pod := gpu()
		runSession(t, sessionCase{
			TestCommonStruct: uthelper.TestCommonStruct{
				Name:          "cpu pod on a bare node",
				Nodes:         []*corev1.Node{newGPUNode("bare", "A100-80GB", 2, 81920).noInventory().obj(t)},
				Pods:          []*corev1.Pod{pod, newPod("ns", "cpu").group("pg-cpu").obj()},
				PodGroups:     []*schedulingv1beta1.PodGroup{podGroup("pg", 1), podGroup("pg-cpu", 1)},
				ExpectBindMap: map[string]string{"ns/cpu": "bare"}, ExpectBindsNum: 1,
			},
			check: func(t *testing.T, r *sessionRun) {
				if msg := fitError(t, r.ssn, pod); !strings.Contains(msg, "node has no vGPU inventory") {
					t.Errorf("fit error %q", msg)
				}
			},
		})
	})
}

func TestSessionGangDiscardRestoresState(t *testing.T) {
	// One 8-GPU node. Job "big" (3 tasks × 4 exclusive GPUs, all needed)
	// comes first: two tasks book all 8 GPUs, the third fits nowhere, and
	// Volcano discards the job. Job "whole" (1 task × 8 exclusive GPUs)
	// comes next and fits only if the discard released every GPU.
	big := podGroup("big", 3)
	whole := podGroup("whole", 1)
	whole.CreationTimestamp = metav1.NewTime(big.CreationTimestamp.Add(time.Second)) // job order: big first
	pods := []*corev1.Pod{gpuPod("ns", "whole", "whole", 8, 81920, 100)}
	for i := range 3 {
		pods = append(pods, gpuPod("ns", fmt.Sprintf("big%d", i), "big", 4, 81920, 100))
	}
	runSession(t, sessionCase{
		TestCommonStruct: uthelper.TestCommonStruct{
			Name:  "gang discard",
			Nodes: []*corev1.Node{newGPUNode("n1", "A100-80GB", 8, 81920).obj(t)},
			Pods:  pods, PodGroups: []*schedulingv1beta1.PodGroup{big, whole},
			ExpectBindMap: map[string]string{"ns/whole": "n1"}, ExpectBindsNum: 1,
		},
		check: func(t *testing.T, r *sessionRun) {
			p := r.plugin
			if got := keys(mapKeys(p.booked)); !slices.Equal(got, []string{"ns-whole"}) {
				t.Errorf("booked after the discard: %v, want only ns-whole", got)
			}
			for _, g := range p.nodes["n1"].GPUs {
				// whole holds every GPU: 81920 MiB, 100%, one exclusive tenant.
				if g.UsedMemoryMiB != 81920 || g.UsedCores != 100 || g.Shares != 1 || g.Exclusive != 1 {
					t.Errorf("%s: %d MiB, %d%%, %d tenants, %d exclusive; want only whole's booking",
						g.UUID, g.UsedMemoryMiB, g.UsedCores, g.Shares, g.Exclusive)
				}
			}
		},
	})
}

func mapKeys(m map[schedapi.TaskID]placement.Placement) map[string]bool {
	out := make(map[string]bool, len(m))
	for k := range m {
		out[string(k)] = true
	}
	return out
}

// bindsOneGPU runs one pod (1 GPU, 4096 MiB, 10 cores) with the annotations
// anno on two nodes, a100 (2 × A100 80GB) and l4 (2 × L4), and checks it is bound to one GPU of wantNode (the
// GPU wantGPU where given).
func bindsOneGPU(t *testing.T, name string, anno map[string]string, wantNode, wantGPU string) {
	t.Helper()
	b := newPod("ns", "p").group("pg").gpus(1, 4096, 10)
	for k, v := range anno {
		b.annotate(k, v)
	}
	runSession(t, sessionCase{
		TestCommonStruct: uthelper.TestCommonStruct{
			Name: name, Nodes: []*corev1.Node{
				newGPUNode("a100", "NVIDIA A100-SXM4-80GB", 2, 81920).obj(t),
				newGPUNode("l4", "NVIDIA L4", 2, 23034).obj(t),
			},
			Pods: []*corev1.Pod{b.obj()}, PodGroups: []*schedulingv1beta1.PodGroup{podGroup("pg", 1)},
			ExpectBindMap: map[string]string{"ns/p": wantNode}, ExpectBindsNum: 1,
		},
		check: func(t *testing.T, r *sessionRun) {
			got := uuids(assignments(t, r, "ns")["p"])
			if len(got) != 1 || !strings.HasPrefix(got[0], "GPU-"+wantNode+"-") || (wantGPU != "" && got[0] != wantGPU) {
				t.Errorf("assigned %v, want one GPU of %s %s", got, wantNode, wantGPU)
			}
		},
	})
}
