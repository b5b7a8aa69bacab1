package plugin

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/prometheus/client_golang/prometheus"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/volcano-vgpu/volcano-vgpu/api"
	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/config"
	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/gpu"
	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/podresources"
	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/replica"
	"github.com/volcano-vgpu/volcano-vgpu/e2e/sim/nvmlsim"
	"github.com/volcano-vgpu/volcano-vgpu/e2e/sim/simconfig"
	"github.com/volcano-vgpu/volcano-vgpu/e2e/sim/simconfig/simtest"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

const testNode = "a100-40g-0"

func simNode(t testing.TB, name string) simconfig.Node {
	t.Helper()
	return simtest.LocalNode(t, name)
}

// jsonLimiter stands in for api.LimiterConfig in tests: readable bytes.
func jsonLimiter(in LimiterInput) ([]byte, error) { return json.Marshal(in) }

// fakeKubelet is a PodResources lister whose answer the test sets.
type fakeKubelet struct {
	mu   sync.Mutex
	pods map[string]map[string][]string // ns/name → container → IDs
	err  error
}

func (f *fakeKubelet) set(pod string, containers map[string][]string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.pods == nil {
		f.pods = map[string]map[string][]string{}
	}
	f.pods["ns/"+pod] = containers
}

func (f *fakeKubelet) List(context.Context) (podresources.Snapshot, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return podresources.Snapshot{}, f.err
	}
	resp := &podresourcesv1.ListPodResourcesResponse{}
	for key, cs := range f.pods {
		pr := &podresourcesv1.PodResources{Namespace: "ns", Name: strings.TrimPrefix(key, "ns/")}
		for c, ids := range cs {
			pr.Containers = append(pr.Containers, &podresourcesv1.ContainerResources{Name: c, Devices: []*podresourcesv1.ContainerDevices{{ResourceName: api.DefaultResourceNumber, DeviceIds: ids}}})
		}
		resp.PodResources = append(resp.PodResources, pr)
	}
	return podresources.NewSnapshot(resp, api.DefaultResourceNumber), nil
}

type testEnv struct {
	p       *Plugin
	client  *fake.Clientset
	kubelet *fakeKubelet
	sim     *nvmlsim.Sim
	node    simconfig.Node
	clock   *clocktesting.FakeClock
	cfg     config.Config
	reg     *prometheus.Registry // the plugin's metrics
}

func newEnv(t *testing.T) *testEnv {
	t.Helper()
	return newEnvIn(t, t.TempDir())
}

func newEnvIn(t testing.TB, stateDir string) *testEnv {
	t.Helper()
	return newEnvWith(t, stateDir, nil)
}

// newEnvWith is newEnvIn with the config changed by edit (nil: defaults,
// with the CDI spec directory under stateDir).
func newEnvWith(t testing.TB, stateDir string, edit func(*config.Config)) *testEnv {
	t.Helper()
	node := simNode(t, testNode)
	return newEnvSim(t, stateDir, nvmlsim.New(node), edit)
}

// newEnvSim is newEnvWith on the simulated GPUs of sim (a node named testNode).
func newEnvSim(t testing.TB, stateDir string, sim *nvmlsim.Sim, edit func(*config.Config)) *testEnv {
	t.Helper()
	node := sim.Node()
	lib, err := gpu.New(sim)
	if err != nil {
		t.Fatal(err)
	}
	cfg := config.Default()
	cfg.StateDir = stateDir
	cfg.CDI.SpecDir = filepath.Join(stateDir, "cdi") // never the host's
	// the driver's MIG capability minors, as the node's /proc lists them
	cfg.CDI.MIGMinors = filepath.Join(stateDir, "mig-minors")
	if err := os.WriteFile(cfg.CDI.MIGMinors, []byte(nvmlsim.MIGMinors()), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg.Allocate.AssignmentWait.Duration = 0
	if edit != nil {
		edit(&cfg)
	}
	e := &testEnv{client: fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: testNode}}), kubelet: &fakeKubelet{}, sim: sim, node: node, clock: clocktesting.NewFakeClock(t0), cfg: cfg, reg: prometheus.NewRegistry()}
	e.p, err = New(context.Background(), Options{
		Node: testNode, Client: e.client, Lib: lib, Config: cfg, MaxShares: node.GPUs[0].MaxShares,
		PodResources: e.kubelet, Limiter: jsonLimiter, Clock: e.clock, Registry: e.reg,
	})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// gpu returns the UUID of GPU i of the test node.
func (e *testEnv) gpu(i int) string { return e.node.GPUs[i].UUID }

// id returns replica k of GPU i.
func (e *testEnv) id(i, k int) string { return replica.ID(e.gpu(i), k) }

// podBuilder: pod("p1").init("setup", share(0)).app("main", share(1), share(2)).obj(e)
type podBuilder struct {
	pod        *corev1.Pod
	containers []api.ContainerAssignment
	raw        *string
}

type shareSpec struct {
	gpu   int
	mem   int64
	cores int
	mig   *api.MIGDevice
}

// migShare is a MIG instance of GPU gpu: profile at start+size, the
// scheduler's cores share of it, and uuid when it took over an instance.
func migShare(gpu int, profile string, memMiB int64, start, size int, uuid string) shareSpec {
	return shareSpec{gpu: gpu, mem: memMiB, cores: 100 * size / 8,
		mig: &api.MIGDevice{Profile: profile, Placement: api.MIGPlacement{Start: start, Size: size}, UUID: uuid}}
}

func share(gpu int) shareSpec { return shareSpec{gpu: gpu, mem: 4096, cores: 25} }

func pod(name string) *podBuilder {
	return &podBuilder{pod: &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID("uid-" + name), Annotations: map[string]string{}},
		Spec:       corev1.PodSpec{NodeName: testNode},
	}}
}

func (b *podBuilder) container(name string, init bool, shares ...shareSpec) *podBuilder {
	c := corev1.Container{Name: name, Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{
		api.DefaultResourceNumber: *resource.NewQuantity(int64(len(shares)), resource.DecimalSI),
	}}}
	ca := api.ContainerAssignment{Name: name, Init: init}
	for _, s := range shares {
		ca.Devices = append(ca.Devices, api.DeviceShare{UUID: fmt.Sprint(s.gpu), MemoryMiB: s.mem, Cores: s.cores, MIG: s.mig})
	}
	if init {
		b.pod.Spec.InitContainers = append(b.pod.Spec.InitContainers, c)
	} else {
		b.pod.Spec.Containers = append(b.pod.Spec.Containers, c)
	}
	b.containers = append(b.containers, ca)
	return b
}

func (b *podBuilder) init(name string, s ...shareSpec) *podBuilder {
	return b.container(name, true, s...)
}
func (b *podBuilder) app(name string, s ...shareSpec) *podBuilder {
	return b.container(name, false, s...)
}
func (b *podBuilder) annotate(k, v string) *podBuilder   { b.pod.Annotations[k] = v; return b }
func (b *podBuilder) rawAssignment(v string) *podBuilder { b.raw = &v; return b }

// obj resolves GPU indexes to the env's UUIDs and encodes the assignment.
func (b *podBuilder) obj(t testing.TB, e *testEnv) *corev1.Pod {
	t.Helper()
	p := b.pod.DeepCopy()
	if b.raw != nil {
		p.Annotations[api.AssignmentKey] = *b.raw
		return p
	}
	a := api.Assignment{PodUID: string(p.UID), Node: testNode, Time: t0, Phase: api.PhaseAssigned}
	for _, c := range b.containers {
		for i := range c.Devices {
			var idx int
			fmt.Sscan(c.Devices[i].UUID, &idx)
			c.Devices[i].UUID = e.gpu(idx)
		}
		a.Containers = append(a.Containers, c)
	}
	v, err := api.EncodeAssignment(a)
	if err != nil {
		t.Fatal(err)
	}
	p.Annotations[api.AssignmentKey] = v
	return p
}

// add puts pods in the API and the plugin's cache.
func (e *testEnv) add(t testing.TB, pods ...*corev1.Pod) {
	t.Helper()
	for _, p := range pods {
		if _, err := e.client.CoreV1().Pods(p.Namespace).Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		e.p.upsertPod(p)
	}
}

func nodeWith(k, v string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: testNode, Annotations: map[string]string{k: v}}}
}
