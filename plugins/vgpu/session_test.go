package vgpu

import (
	"context"
	"fmt"
	"os"
	"sort"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	schedulingv1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"
	"volcano.sh/volcano/cmd/scheduler/app/options"
	"volcano.sh/volcano/pkg/scheduler/actions/allocate"
	"volcano.sh/volcano/pkg/scheduler/conf"
	"volcano.sh/volcano/pkg/scheduler/framework"
	"volcano.sh/volcano/pkg/scheduler/plugins"
	"volcano.sh/volcano/pkg/scheduler/plugins/gang"
	"volcano.sh/volcano/pkg/scheduler/plugins/proportion"
	"volcano.sh/volcano/pkg/scheduler/uthelper"
	"volcano.sh/volcano/pkg/scheduler/util"

	"github.com/volcano-vgpu/volcano-vgpu/api"
)

func TestMain(m *testing.M) {
	options.Default()
	os.Exit(m.Run())
}

var testNow = time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)

// gpuNode is a fixture builder for a GPU node with its inventory annotation.
type gpuNode struct {
	name   string
	inv    api.Inventory
	shares int
}

func newGPUNode(name, model string, n int, memMiB int64) *gpuNode {
	g := &gpuNode{name: name, shares: 10}
	g.inv = api.Inventory{Heartbeat: testNow, NVLinks: make([][]int, n), PCIe: make([][]api.PCIeLevel, n)}
	for i := 0; i < n; i++ {
		g.inv.GPUs = append(g.inv.GPUs, api.GPU{Index: i, UUID: fmt.Sprintf("GPU-%s-%d", name, i), Model: model,
			MemoryMiB: memMiB, Healthy: true, NUMA: i * 2 / n, MaxShares: g.shares})
		g.inv.NVLinks[i] = make([]int, n)
		g.inv.PCIe[i] = make([]api.PCIeLevel, n)
		for j := 0; j < n; j++ {
			if i != j {
				g.inv.PCIe[i][j] = api.PCIeSystem
				if i*2/n == j*2/n {
					g.inv.PCIe[i][j] = api.PCIeNode
				}
			}
		}
	}
	return g
}

// nvlinkPairs links (0,1)(2,3)… with 4 NVLinks each.
func (g *gpuNode) nvlinkPairs() *gpuNode {
	for i := 0; i+1 < len(g.inv.GPUs); i += 2 {
		g.inv.NVLinks[i][i+1], g.inv.NVLinks[i+1][i] = 4, 4
	}
	return g
}

func (g *gpuNode) obj(t *testing.T) *corev1.Node {
	t.Helper()
	value, err := api.EncodeInventory(g.inv)
	if err != nil {
		t.Fatal(err)
	}
	n := len(g.inv.GPUs)
	alloc := corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse("64"), corev1.ResourceMemory: resource.MustParse("512Gi"),
		corev1.ResourcePods:       resource.MustParse("110"),
		api.DefaultResourceNumber: *resource.NewQuantity(int64(n*g.shares), resource.DecimalSI),
		api.DefaultResourceMemory: *resource.NewQuantity(int64(n)*g.inv.GPUs[0].MemoryMiB, resource.DecimalSI),
		api.DefaultResourceCores:  *resource.NewQuantity(int64(n*100), resource.DecimalSI),
	}
	node := util.BuildNode(g.name, alloc, nil)
	node.Annotations = map[string]string{api.InventoryKey: value}
	return node
}

func gpuPod(ns, name, group string, number, memMiB, cores int64) *corev1.Pod {
	res := corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("1Gi"),
		api.DefaultResourceNumber: *resource.NewQuantity(number, resource.DecimalSI),
		api.DefaultResourceMemory: *resource.NewQuantity(memMiB, resource.DecimalSI),
		api.DefaultResourceCores:  *resource.NewQuantity(cores, resource.DecimalSI),
	}
	pod := util.BuildPod(ns, name, "", corev1.PodPending, res, group, nil, nil)
	pod.UID = types.UID(ns + "-" + name)
	pod.Spec.Containers[0].Name = "main"
	pod.Spec.Containers[0].Resources.Limits = res
	return pod
}

func tiers() []conf.Tier {
	opts := []conf.PluginOption{{Name: gang.PluginName}, {Name: proportion.PluginName}, {Name: PluginName}}
	for i := range opts {
		plugins.ApplyPluginConfDefaults(&opts[i])
	}
	return []conf.Tier{{Plugins: opts}}
}

type sessionCase struct {
	uthelper.TestCommonStruct
	check func(t *testing.T, kube kubernetes.Interface)
}

func runSession(t *testing.T, tc sessionCase) {
	t.Helper()
	shared := NewShared(func() time.Time { return testNow })
	tc.Plugins = map[string]framework.PluginBuilder{
		gang.PluginName: gang.New, proportion.PluginName: proportion.New, PluginName: NewBuilder(shared),
	}
	tc.Queues = []*schedulingv1beta1.Queue{util.BuildQueue("q1", 1, nil)}
	ssn := tc.RegisterSession(tiers(), nil)
	defer tc.Close()
	kube := ssn.KubeClient()
	for _, p := range tc.Pods { // PreBind patches pods through the API
		if _, err := kube.CoreV1().Pods(p.Namespace).Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	tc.Run([]framework.Action{allocate.New()})
	if err := tc.CheckAll(0); err != nil {
		t.Fatal(err)
	}
	if tc.check != nil {
		tc.check(t, kube)
	}
}

// assignments reads every pod's assignment from the API.
func assignments(t *testing.T, kube kubernetes.Interface, ns string) map[string]api.Assignment {
	t.Helper()
	pods, err := kube.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]api.Assignment{}
	for _, p := range pods.Items {
		if v, ok := p.Annotations[api.AssignmentKey]; ok {
			a, err := api.DecodeAssignment(v)
			if err != nil {
				t.Fatalf("pod %s: %v", p.Name, err)
			}
			out[p.Name] = a
		}
	}
	return out
}

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
		check: func(t *testing.T, kube kubernetes.Interface) {
			as := assignments(t, kube, "ns")
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
		check: func(t *testing.T, kube kubernetes.Interface) {
			if as := assignments(t, kube, "ns"); len(as) != 0 {
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
		check: func(t *testing.T, kube kubernetes.Interface) {
			a := assignments(t, kube, "ns")["new"]
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
