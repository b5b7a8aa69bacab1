package vgpu

import (
	"context"
	"fmt"
	"os"
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
	schedapi "volcano.sh/volcano/pkg/scheduler/api"
	"volcano.sh/volcano/pkg/scheduler/conf"
	"volcano.sh/volcano/pkg/scheduler/framework"
	"volcano.sh/volcano/pkg/scheduler/plugins"
	"volcano.sh/volcano/pkg/scheduler/plugins/gang"
	"volcano.sh/volcano/pkg/scheduler/plugins/proportion"
	"volcano.sh/volcano/pkg/scheduler/uthelper"
	"volcano.sh/volcano/pkg/scheduler/util"

	"github.com/volcano-vgpu/volcano-vgpu/api"
	"github.com/volcano-vgpu/volcano-vgpu/plugins/placement"
)

func TestMain(m *testing.M) {
	options.Default()
	os.Exit(m.Run())
}

var testNow = time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)

// gpuNode is a fixture builder for a GPU node with its inventory annotation:
//
//	newGPUNode("n1", "A100-80GB", 8, 81920).nvlinkPairs().heartbeat(old).obj(t)
//
// GPU UUIDs are "GPU-<node>-<index>"; GPUs 0..n/2-1 sit on NUMA node 0.
type gpuNode struct {
	name   string
	inv    api.Inventory
	shares int
	raw    *string // annotation value overriding inv (malformed inventories)
	bare   bool    // no inventory annotation at all
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

// mode publishes the GPUs at positions in mode m.
func (g *gpuNode) mode(m api.GPUMode, positions ...int) *gpuNode {
	for _, i := range positions {
		g.inv.GPUs[i].Mode = m
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

// nvswitch links every pair with 12 NVLinks (A100 SXM through NVSwitch).
func (g *gpuNode) nvswitch() *gpuNode {
	for i := range g.inv.GPUs {
		for j := range g.inv.GPUs {
			if i != j {
				g.inv.NVLinks[i][j] = 12
			}
		}
	}
	return g
}

// heartbeat sets the inventory's heartbeat (testNow by default).
func (g *gpuNode) heartbeat(t time.Time) *gpuNode { g.inv.Heartbeat = t; return g }

// rawInventory publishes value as the inventory annotation, as is.
func (g *gpuNode) rawInventory(value string) *gpuNode { g.raw = &value; return g }

// noInventory leaves the annotation out; the vGPU resources stay allocatable,
// so only the plugin can refuse GPU pods there.
func (g *gpuNode) noInventory() *gpuNode { g.bare = true; return g }

func (g *gpuNode) obj(t testing.TB) *corev1.Node {
	t.Helper()
	value, err := api.EncodeInventory(g.inv)
	if err != nil {
		t.Fatal(err)
	}
	if g.raw != nil {
		value = *g.raw
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
	node.Annotations = map[string]string{}
	if !g.bare {
		node.Annotations[api.InventoryKey] = value
	}
	return node
}

// podBuilder builds a pod of a PodGroup, pending and unbound unless told:
//
//	newPod("ns", "w0").group("pg1").gpus(1, 8192, 25).annotate(api.DevicePolicyKey, "spread").obj()
type podBuilder struct{ pod *corev1.Pod }

func newPod(ns, name string) *podBuilder {
	res := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("1Gi")}
	pod := util.BuildPod(ns, name, "", corev1.PodPending, res, "", nil, nil)
	pod.UID = types.UID(ns + "-" + name)
	pod.Spec.Containers[0].Name = "main"
	return &podBuilder{pod: pod}
}

func (b *podBuilder) group(pg string) *podBuilder {
	b.pod.Annotations[schedulingv1beta1.KubeGroupNameAnnotationKey] = pg
	return b
}

// gpus asks number GPUs with memMiB and cores (percent) on each.
func (b *podBuilder) gpus(number, memMiB, cores int64) *podBuilder {
	c := &b.pod.Spec.Containers[0]
	c.Resources.Requests[api.DefaultResourceNumber] = *resource.NewQuantity(number, resource.DecimalSI)
	c.Resources.Requests[api.DefaultResourceMemory] = *resource.NewQuantity(memMiB, resource.DecimalSI)
	c.Resources.Requests[api.DefaultResourceCores] = *resource.NewQuantity(cores, resource.DecimalSI)
	c.Resources.Limits = c.Resources.Requests.DeepCopy()
	return b
}

func (b *podBuilder) annotate(key, value string) *podBuilder {
	b.pod.Annotations[key] = value
	return b
}

// on puts the pod on node in phase (Pending there = bound, not started).
func (b *podBuilder) on(node string, phase corev1.PodPhase) *podBuilder {
	b.pod.Spec.NodeName, b.pod.Status.Phase = node, phase
	return b
}

// assigned records the pod's assignment: its main container on devices.
func (b *podBuilder) assigned(t testing.TB, devices ...api.DeviceShare) *podBuilder {
	t.Helper()
	value, err := api.EncodeAssignment(assignmentOf(b.pod, devices...))
	if err != nil {
		t.Fatal(err)
	}
	return b.annotate(api.AssignmentKey, value)
}

func (b *podBuilder) obj() *corev1.Pod { return b.pod }

// assignmentOf is the assignment of pod's main container on devices.
func assignmentOf(pod *corev1.Pod, devices ...api.DeviceShare) api.Assignment {
	return api.Assignment{PodUID: string(pod.UID), Node: pod.Spec.NodeName, Time: testNow, Phase: api.PhaseAllocated,
		Containers: []api.ContainerAssignment{{Name: pod.Spec.Containers[0].Name, Devices: devices}}}
}

func gpuPod(ns, name, group string, number, memMiB, cores int64) *corev1.Pod {
	return newPod(ns, name).group(group).gpus(number, memMiB, cores).obj()
}

func podGroup(name string, minMember int32) *schedulingv1beta1.PodGroup {
	return util.BuildPodGroup(name, "ns", "q1", minMember, nil, schedulingv1beta1.PodGroupInqueue)
}

func tiers(args map[string]any) []conf.Tier {
	opts := []conf.PluginOption{{Name: gang.PluginName}, {Name: proportion.PluginName}, {Name: PluginName, Arguments: args}}
	for i := range opts {
		plugins.ApplyPluginConfDefaults(&opts[i])
	}
	return []conf.Tier{{Plugins: opts}}
}

type sessionCase struct {
	uthelper.TestCommonStruct
	args   map[string]any // vgpu plugin arguments
	shared *Shared        // cross-session state; a fresh one if nil
	check  func(t *testing.T, r *sessionRun)
	// afterClose runs once the session has closed (every plugin's
	// OnSessionClose and Volcano's job updater have run).
	afterClose func(t *testing.T)
}

// sessionRun is what a check can inspect after the allocate action, before
// the session closes.
type sessionRun struct {
	kube   kubernetes.Interface
	ssn    *framework.Session
	plugin *plugin // this session's vgpu plugin
}

func runSession(t *testing.T, tc sessionCase) {
	t.Helper()
	shared := tc.shared
	if shared == nil {
		shared = NewShared(func() time.Time { return testNow })
	}
	run := &sessionRun{}
	tc.Plugins = map[string]framework.PluginBuilder{
		gang.PluginName: gang.New, proportion.PluginName: proportion.New,
		PluginName: func(args framework.Arguments) framework.Plugin {
			run.plugin = newPlugin(shared, args)
			return run.plugin
		},
	}
	tc.Queues = []*schedulingv1beta1.Queue{util.BuildQueue("q1", 1, nil)}
	run.ssn = tc.RegisterSession(tiers(tc.args), nil)
	closed := false
	defer func() {
		if !closed {
			tc.Close()
		}
	}()
	run.kube = run.ssn.KubeClient()
	for _, p := range tc.Pods { // assignments lists them
		if _, err := run.kube.CoreV1().Pods(p.Namespace).Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	tc.Run([]framework.Action{allocate.New()})
	if err := tc.CheckAll(0); err != nil {
		t.Fatal(err)
	}
	if tc.check != nil {
		tc.check(t, run)
	}
	if tc.afterClose != nil {
		tc.Close()
		closed = true
		tc.afterClose(t)
	}
}

// assignments is every pod's assignment once the session's Bindings have
// landed: for a pod this scheduler dispatched, the value its Binding carries
// (recorded in flight; bind_test proves the Binding carries exactly that
// value onto the pod), else the pod's own annotation. Volcano's test binder
// records only node names and writes nothing to the API.
func assignments(t *testing.T, r *sessionRun, ns string) map[string]api.Assignment {
	t.Helper()
	pods, err := r.kube.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]api.Assignment{}
	inflight := r.plugin.shared.Inflight
	inflight.mu.Lock()
	defer inflight.mu.Unlock()
	for _, p := range pods.Items {
		v, ok := p.Annotations[api.AssignmentKey]
		if e, dispatched := inflight.entries[p.UID]; dispatched {
			v, ok = e.value, true
		}
		if !ok {
			continue
		}
		a, err := api.DecodeAssignment(v)
		if err != nil {
			t.Fatalf("pod %s: %v", p.Name, err)
		}
		out[p.Name] = a
	}
	return out
}

// uuids lists the GPUs of an assignment's containers.
func uuids(a api.Assignment) []string {
	var out []string
	for _, c := range a.Containers {
		for _, d := range c.Devices {
			out = append(out, d.UUID)
		}
	}
	return out
}

// fitError is the message Volcano recorded for a task that found no node.
func fitError(t *testing.T, ssn *framework.Session, pod *corev1.Pod) string {
	t.Helper()
	job := ssn.Jobs[schedapi.JobID(pod.Namespace+"/"+pod.Annotations[schedulingv1beta1.KubeGroupNameAnnotationKey])]
	if job == nil {
		t.Fatalf("no job for pod %s", pod.Name)
	}
	fe := job.NodesFitErrors[schedapi.TaskID(pod.UID)]
	if fe == nil {
		t.Fatalf("no fit errors recorded for pod %s", pod.Name)
	}
	return fe.Error()
}

// handSession is a plugin with a session opened by hand, without Volcano's
// framework: pods with a node are on it, every pod is a task of the job its
// PodGroup annotation names. For unit tests and benchmarks of the handlers.
type handSession struct {
	plugin *plugin
	nodes  map[string]*schedapi.NodeInfo
	tasks  map[string]*schedapi.TaskInfo // by pod name
}

func newHandSession(tb testing.TB, shared *Shared, args Args, nodes []*corev1.Node, pods []*corev1.Pod) *handSession {
	tb.Helper()
	h := &handSession{nodes: map[string]*schedapi.NodeInfo{}, tasks: map[string]*schedapi.TaskInfo{}}
	for _, n := range nodes {
		h.nodes[n.Name] = schedapi.NewNodeInfo(n)
	}
	jobs := map[schedapi.JobID]*schedapi.JobInfo{}
	for _, pod := range pods {
		task := schedapi.NewTaskInfo(pod)
		h.tasks[pod.Name] = task
		if pod.Spec.NodeName != "" {
			if err := h.nodes[pod.Spec.NodeName].AddTask(task); err != nil {
				tb.Fatal(err)
			}
		}
		if jobs[task.Job] == nil {
			jobs[task.Job] = schedapi.NewJobInfo(task.Job)
		}
		jobs[task.Job].AddTaskInfo(task)
	}
	if shared == nil {
		shared = NewShared(func() time.Time { return testNow })
	}
	p := &plugin{shared: shared, args: args, ok: true, ssn: &framework.Session{Jobs: jobs, Nodes: h.nodes}}
	p.fitters.New = func() any { return &placement.Fitter{} }
	p.buildState(h.nodes, testNow)
	h.plugin = p
	return h
}

// nodeList is the session's nodes in name order.
func (h *handSession) nodeList() []*schedapi.NodeInfo {
	out := make([]*schedapi.NodeInfo, 0, len(h.nodes))
	for _, name := range keys(h.nodes) {
		out = append(out, h.nodes[name])
	}
	return out
}
