package kubeletemu_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/volcano-vgpu/volcano-vgpu/api"
	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/config"
	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/gpu"
	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/plugin"
	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/podresources"
	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/replica"
	"github.com/volcano-vgpu/volcano-vgpu/e2e/kubeletemu"
	"github.com/volcano-vgpu/volcano-vgpu/e2e/sim/nvmlsim"
	"github.com/volcano-vgpu/volcano-vgpu/e2e/sim/simconfig"
)

const nodeName = "a100-40g-0"

type cluster struct {
	t      *testing.T
	base   string
	client *fake.Clientset
	node   simconfig.Node
	emu    *kubeletemu.Emulator
	stopEm context.CancelFunc
	emDone chan error
}

func simNode(t *testing.T) simconfig.Node {
	_, here, _, _ := runtime.Caller(0)
	f, err := simconfig.Load(filepath.Join(filepath.Dir(here), "..", "sim", "clusters", "local.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	n, _ := f.Find(nodeName)
	return n
}

// startCluster wires a fake API server, the kubelet emulator and the real
// device plugin (simulated NVML) over real unix sockets.
func startCluster(t *testing.T) *cluster {
	base, err := os.MkdirTemp("", "emu") // short: socket paths are limited to 107 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	c := &cluster{t: t, base: base, node: simNode(t), client: fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName}})}
	c.startEmulator()

	ctx, cancel := context.WithCancel(context.Background())
	cfg := config.Default()
	cfg.Kubelet.DevicePluginsDir = filepath.Join(base, nodeName, "device-plugins")
	cfg.Kubelet.KubeletSocket = filepath.Join(cfg.Kubelet.DevicePluginsDir, "kubelet.sock")
	cfg.Kubelet.PodResourcesSocket = filepath.Join(base, nodeName, "pod-resources", "kubelet.sock")
	cfg.StateDir = filepath.Join(base, nodeName, "state")
	cfg.CDI.SpecDir = filepath.Join(base, nodeName, "cdi")
	cfg.MetricsAddress = ""
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	lib, err := gpu.New(nvmlsim.New(c.node))
	if err != nil {
		t.Fatal(err)
	}
	pr, err := podresources.NewClient(cfg.Kubelet.PodResourcesSocket, cfg.ResourceNames.Number, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	p, err := plugin.New(ctx, plugin.Options{Node: nodeName, Client: c.client, Lib: lib, Config: cfg, MaxShares: 10, PodResources: pr, Limiter: plugin.EncodeLimiter})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx, nil) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
		c.stopEmulator()
	})
	c.waitFor("vgpu-number allocatable 80 (8 GPUs × 10)", func() bool {
		n, _ := c.client.CoreV1().Nodes().Get(context.Background(), nodeName, metav1.GetOptions{})
		q := n.Status.Allocatable[api.DefaultResourceNumber]
		return q.Value() == 80
	})
	return c
}

func (c *cluster) startEmulator() {
	emu, err := kubeletemu.New(kubeletemu.Options{Client: c.client, BaseDir: c.base, Nodes: []string{nodeName}, RegisterWait: 10 * time.Second})
	if err != nil {
		c.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	c.emu, c.stopEm, c.emDone = emu, cancel, make(chan error, 1)
	go func() { c.emDone <- emu.Run(ctx) }()
	select {
	case <-emu.Ready():
	case err := <-c.emDone:
		c.t.Fatal(err)
	}
}

func (c *cluster) stopEmulator() {
	c.stopEm()
	if err := <-c.emDone; err != nil {
		c.t.Error(err)
	}
}

func (c *cluster) waitFor(what string, cond func() bool) {
	c.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			c.t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

type ctr struct {
	name string
	init bool
	gpus []int
}

// pod creates a bound pod with an assignment: each container gets
// 1000×(its index+1) MiB and 10 cores on each of its GPUs.
func (c *cluster) pod(name string, containers ...ctr) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID("uid-" + name), Annotations: map[string]string{}, CreationTimestamp: metav1.Now()},
		Spec:       corev1.PodSpec{NodeName: nodeName},
	}
	a := api.Assignment{PodUID: string(p.UID), Node: nodeName, Time: time.Now(), Phase: api.PhaseAssigned}
	for i, ct := range containers {
		k := corev1.Container{Name: ct.name, Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{
			api.DefaultResourceNumber: *resource.NewQuantity(int64(len(ct.gpus)), resource.DecimalSI),
		}}}
		ca := api.ContainerAssignment{Name: ct.name, Init: ct.init}
		for _, g := range ct.gpus {
			ca.Devices = append(ca.Devices, api.DeviceShare{UUID: c.node.GPUs[g].UUID, MemoryMiB: int64(1000 * (i + 1)), Cores: 10})
		}
		a.Containers = append(a.Containers, ca)
		if ct.init {
			p.Spec.InitContainers = append(p.Spec.InitContainers, k)
		} else {
			p.Spec.Containers = append(p.Spec.Containers, k)
		}
	}
	v, err := api.EncodeAssignment(a)
	if err != nil {
		c.t.Fatal(err)
	}
	p.Annotations[api.AssignmentKey] = v
	return p
}

func (c *cluster) create(pods ...*corev1.Pod) {
	var wg sync.WaitGroup
	for _, p := range pods {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := c.client.CoreV1().Pods(p.Namespace).Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
				c.t.Error(err)
			}
		}()
	}
	wg.Wait()
}

func (c *cluster) record(p *corev1.Pod) kubeletemu.Record {
	c.t.Helper()
	var rec kubeletemu.Record
	c.waitFor("record of "+p.Name, func() bool {
		var err error
		rec, err = kubeletemu.ReadRecord(c.base, nodeName, string(p.UID))
		return err == nil
	})
	return rec
}

// checkServed asserts that every container got exactly its assigned GPUs,
// IDs on those GPUs, its own limits, and passed PreStart.
func (c *cluster) checkServed(p *corev1.Pod, rec kubeletemu.Record) {
	c.t.Helper()
	a, _ := api.DecodeAssignment(p.Annotations[api.AssignmentKey])
	if !rec.Admitted || rec.Error != "" {
		c.t.Fatalf("pod %s not admitted: %s", p.Name, rec.Error)
	}
	for _, cr := range rec.Containers {
		ca, ok := a.Container(cr.Name, cr.Init)
		if !ok {
			c.t.Fatalf("pod %s: record for unknown container %s", p.Name, cr.Name)
		}
		var want []string
		for _, d := range ca.Devices {
			want = append(want, d.UUID)
		}
		if got := cr.Response.GPUs(); strings.Join(got, ",") != strings.Join(want, ",") || cr.Response.Envs[plugin.EnvVisibleDevices] != plugin.VisibleDevicesVoid {
			c.t.Errorf("pod %s container %s: GPUs %v (%s=%q), assigned %s", p.Name, cr.Name, got, plugin.EnvVisibleDevices, cr.Response.Envs[plugin.EnvVisibleDevices], want)
		}
		for i, id := range cr.DeviceIDs {
			if slices.Contains(cr.Reused, id) {
				continue // kubelet hands an init container's IDs to the next containers
			}
			if u := replica.UUID(id); !strings.Contains(strings.Join(want, ","), u) {
				c.t.Errorf("pod %s container %s: kubelet got ID %d %s on a GPU it is not assigned", p.Name, cr.Name, i, id)
			}
		}
		m, ok := cr.Response.Mount("/etc/vcuda/vcuda.config")
		if !ok || !m.ReadOnly {
			c.t.Fatalf("pod %s container %s: limiter config mount %+v", p.Name, cr.Name, m)
		}
		b, err := os.ReadFile(m.HostPath)
		if err != nil {
			c.t.Fatal(err)
		}
		lim, err := api.DecodeLimiterConfig(b)
		if err != nil {
			c.t.Fatalf("pod %s container %s: %v", p.Name, cr.Name, err)
		}
		if lim.PodUID != string(p.UID) || lim.ContainerName != cr.Name || lim.Devices[0].MemoryLimitBytes != uint64(ca.Devices[0].MemoryMiB)<<20 {
			c.t.Errorf("pod %s container %s: limiter config %+v", p.Name, cr.Name, lim)
		}
		if !cr.PreStart || cr.PreStartError != "" {
			c.t.Errorf("pod %s container %s: PreStart called %v, error %q", p.Name, cr.Name, cr.PreStart, cr.PreStartError)
		}
	}
}

func TestEndToEnd(t *testing.T) {
	c := startCluster(t)
	ctx := context.Background()

	// 40 single-GPU pods created at once, five on each GPU: each must get
	// its own GPU and limits although many share a GPU.
	var pods []*corev1.Pod
	for i := range 40 {
		pods = append(pods, c.pod(fmt.Sprintf("p%02d", i), ctr{name: "main", gpus: []int{i % 8}}))
	}
	pods = append(pods, c.pod("mixed", ctr{name: "setup", init: true, gpus: []int{1}}, ctr{name: "train", gpus: []int{2, 3}}, ctr{name: "side", gpus: []int{2}}))
	c.create(pods...)
	for _, p := range pods {
		c.checkServed(p, c.record(p))
	}

	// A malformed assignment: a clear Allocate error, an event, no crash.
	bad := c.pod("bad", ctr{name: "main", gpus: []int{5}})
	bad.Annotations[api.AssignmentKey] = `{"version":"v1","podUID":`
	c.create(bad)
	rec := c.record(bad)
	if rec.Admitted || !strings.Contains(rec.Error, "Allocate failed due to") || !strings.Contains(rec.Error, "ns/bad: volcano-vgpu.io/assignment") {
		t.Errorf("malformed assignment: admitted %v, error %q", rec.Admitted, rec.Error)
	}
	c.waitFor("UnexpectedAdmissionError event", func() bool {
		evs, _ := c.client.CoreV1().Events("ns").List(ctx, metav1.ListOptions{})
		for _, e := range evs.Items {
			if e.Reason == "UnexpectedAdmissionError" && e.InvolvedObject.Name == "bad" {
				return true
			}
		}
		return false
	})
	c.waitFor("the rejected pod Failed with kubelet's reason", func() bool {
		p, _ := c.client.CoreV1().Pods("ns").Get(ctx, "bad", metav1.GetOptions{})
		return p != nil && p.Status.Phase == corev1.PodFailed && p.Status.Reason == "UnexpectedAdmissionError" && strings.Contains(p.Status.Message, "Allocate failed due to")
	})

	// Kubelet restarts: sockets wiped, kubelet.sock recreated. The plugin
	// registers again; earlier pods keep their devices; new pods work.
	c.stopEmulator()
	c.startEmulator()
	after := c.pod("after-restart", ctr{name: "main", gpus: []int{0}})
	c.create(after)
	c.checkServed(after, c.record(after))
	for _, p := range pods[:8] {
		if got := c.emu.Node(nodeName).Allocated(string(p.UID), "main", api.DefaultResourceNumber); len(got) != 1 {
			t.Errorf("pod %s lost its devices across the kubelet restart: %v", p.Name, got)
		}
	}

	// The node report: inventory and node-level resources.
	n, err := c.client.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	inv, err := api.DecodeInventory(n.Annotations[api.InventoryKey])
	if err != nil || len(inv.GPUs) != 8 || inv.NVLinks[0][1] != 4 {
		t.Errorf("inventory: %v, %+v", err, inv)
	}
	mem := n.Status.Allocatable[api.DefaultResourceMemory]
	if mem.Value() != 8*40960 {
		t.Errorf("vgpu-memory allocatable = %s, want %d", mem.String(), 8*40960)
	}
}
