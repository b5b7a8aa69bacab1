//go:build e2e

package tests

// The whole chain: a Volcano Job is placed by our scheduler, served by the
// device plugin through the kubelet emulator, and a CUDA-like workload runs
// in the emulated container (e2e/containeremu) with libvcuda preloaded on
// the fake driver of its node. What the workload sees is what a user would
// see with nvidia-smi inside the pod.
//
// Shares are real time on a shared machine: a launcher starved of CPU idles
// its GPU whatever the limiter does, so a missed share is measured once more
// (the miss is logged with the load average) and the second result counts.

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/volcano-vgpu/volcano-vgpu/api"
	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/preloadhook"
	"github.com/volcano-vgpu/volcano-vgpu/e2e/containeremu"
	"github.com/volcano-vgpu/volcano-vgpu/e2e/sim/simconfig"
)

const (
	chainA100       = "A100-SXM4-80GB"
	chainShareSlack = 0.03 // ± 3 points of a GPU
)

// chainEmulator is a container emulator on the shared cluster's nodes; it
// logs which mode its containers run in.
func chainEmulator(t *testing.T) *containeremu.Emulator {
	t.Helper()
	c := shared.cl.Config
	emu, err := containeremu.New(containeremu.DefaultConfig(c.Root, c.SocketDir))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("container emulator: %s mode (%s)", emu.Mode(), emu.Reason())
	return emu
}

func chainNode(t *testing.T, name string) simconfig.Node {
	t.Helper()
	i := slices.IndexFunc(shared.cl.Nodes, func(n simconfig.Node) bool { return n.Name == name })
	if i < 0 {
		t.Fatalf("node %s is not a simulated node of this cluster", name)
	}
	return shared.cl.Nodes[i]
}

// chainContainer is the pod's first container, as the kubelet emulator
// recorded its Allocate response, on its node's simulated GPUs.
func chainContainer(t *testing.T, ctx context.Context, p corev1.Pod) containeremu.Container {
	t.Helper()
	rec := waitAllocated(t, ctx, p)
	c, err := containeremu.FromRecord(rec, p.Spec.Containers[0].Name, containeremu.NodeGPUs(chainNode(t, p.Spec.NodeName)))
	if err != nil {
		t.Fatal(err)
	}
	c.QOSClass = string(p.Status.QOSClass)
	return c
}

// a30 is one running pod with a 30% share of an A100 and memMiB, in a
// namespace of its own, with its container and the node's emulator: where a
// test runs workloads inside a pod (ctx ends after 3 minutes).
type a30 struct {
	ctx context.Context
	ns  string
	pod corev1.Pod
	c   containeremu.Container
	emu *containeremu.Emulator
}

func runningA30(t *testing.T, name string, memMiB int64) a30 {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	s := a30{ctx: ctx, ns: newNamespace(t, ctx)}
	s.pod, _ = chainRunningPod(t, ctx, s.ns, name, 1, memMiB, 30, map[string]string{api.GPUTypeIncludeKey: chainA100})
	s.c, s.emu = chainContainer(t, ctx, s.pod), chainEmulator(t)
	return s
}

// chainRunningPod creates a one-task Job and returns its running pod and the
// GPUs assigned to its container.
func chainRunningPod(t *testing.T, ctx context.Context, ns, name string, number, memMiB, cores int64, annotations map[string]string) (corev1.Pod, []api.DeviceShare) {
	t.Helper()
	job := gpuJob(ns, name, 1, number, memMiB, cores, annotations)
	if _, err := shared.vc.BatchV1alpha1().Jobs(ns).Create(ctx, job, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var pod corev1.Pod
	waitFor(t, ctx, "running pod of job "+name, func() error {
		list, err := shared.kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		for _, p := range list.Items {
			if strings.HasPrefix(p.Name, name+"-") && p.Spec.NodeName != "" && p.Status.Phase == corev1.PodRunning {
				pod = p
				return nil
			}
		}
		return fmt.Errorf("none of %d pods in %s is job %s's and running", len(list.Items), ns, name)
	})
	devs := podAssignment(t, pod).Containers[0].Devices
	if len(devs) != int(number) {
		t.Fatalf("%s: assigned %d GPUs, asked %d", pod.Name, len(devs), number)
	}
	for _, d := range devs {
		if d.MemoryMiB != memMiB || int64(d.Cores) != cores {
			t.Fatalf("%s: assigned %+v, asked %d MiB and %d%% per GPU", pod.Name, d, memMiB, cores)
		}
	}
	return pod, devs
}

// chainMeasure runs attempt up to twice: a miss on the first attempt is
// logged with the load average and measured again; the second one counts.
func chainMeasure(t *testing.T, what string, attempt func() (ok bool, detail string)) {
	t.Helper()
	for try := 1; ; try++ {
		ok, detail := attempt()
		switch {
		case ok:
			t.Logf("%s: %s (attempt %d)", what, detail, try)
			return
		case try == 2:
			t.Errorf("%s: %s (load average %s on %d cores)", what, detail, chainLoad(), runtime.NumCPU())
			return
		}
		t.Logf("%s missed on attempt 1: %s (load average %s on %d cores): measuring again", what, detail, chainLoad(), runtime.NumCPU())
	}
}

func chainLoad() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	return strings.Join(strings.Fields(string(b))[:3], " ")
}

func chainShare(s containeremu.Summary) float64 {
	if s.UtilShare == nil {
		return math.NaN()
	}
	return *s.UtilShare
}

func chainNear(got, want float64) bool { return math.Abs(got-want) <= chainShareSlack }

// chainCheckMemory: the container sees its cap as the whole GPU, its own
// use only (held), and is refused with OUT_OF_MEMORY right past the cap.
func chainCheckMemory(t *testing.T, who string, s containeremu.Summary, capMiB int64) {
	t.Helper()
	free := capMiB - s.HeldMiB
	if s.CUDATotalMiB != capMiB || s.NVMLTotalMiB != capMiB {
		t.Errorf("%s: total %d MiB (CUDA), %d MiB (NVML); want its cap %d", who, s.CUDATotalMiB, s.NVMLTotalMiB, capMiB)
	}
	if s.CUDAFreeMiB != free || s.NVMLUsedMiB != s.HeldMiB || s.EndCUDAFreeMiB != free || s.EndNVMLUsedMiB != s.HeldMiB {
		t.Errorf("%s: free %d/%d MiB and used %d/%d MiB (start/end); want free %d, used %d (its own only)",
			who, s.CUDAFreeMiB, s.EndCUDAFreeMiB, s.NVMLUsedMiB, s.EndNVMLUsedMiB, free, s.HeldMiB)
	}
	if s.AllocatableMiB() != capMiB || s.AllocError != containeremu.CUDAErrorOutOfMemory {
		t.Errorf("%s: allocated %d MiB in %d MiB chunks, then CUresult %d; want exactly %d MiB, then CUDA_ERROR_OUT_OF_MEMORY (%d)",
			who, s.AllocatableMiB(), s.AllocChunkMiB, s.AllocError, capMiB, containeremu.CUDAErrorOutOfMemory)
	}
}

// TestChainFractionalGPU: a Job asking 8 GiB and 30% of an A100-80GB. In its
// container the workload sees exactly the assigned GPU, 8192 MiB of it, is
// refused with OUT_OF_MEMORY at the first MiB past that, and gets 30% of the
// simulated GPU's time.
func TestChainFractionalGPU(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ns := newNamespace(t, ctx)
	pod, devs := chainRunningPod(t, ctx, ns, "frac", 1, 8192, 30, map[string]string{api.GPUTypeIncludeKey: chainA100})
	node := chainNode(t, pod.Spec.NodeName)
	idx := slices.IndexFunc(node.GPUs, func(g simconfig.GPU) bool { return g.UUID == devs[0].UUID })
	if idx < 0 || !strings.Contains(node.GPUs[idx].Model, chainA100) {
		t.Fatalf("%s got %s on %s, not one of its %s GPUs", pod.Name, devs[0].UUID, node.Name, chainA100)
	}
	c := chainContainer(t, ctx, pod)
	emu := chainEmulator(t)

	var s containeremu.Summary
	chainMeasure(t, "share of a 30% container", func() (bool, string) {
		var err error
		// 1 MiB chunks: the 8193rd MiB is the one refused.
		if s, err = emu.RunWorkload(ctx, c, containeremu.Workload{ChunkMiB: 1, Seconds: 2}); err != nil {
			t.Fatal(err)
		}
		return chainNear(chainShare(s), 0.30), fmt.Sprintf("%.1f%% of the GPU, want 30 ± 3", 100*chainShare(s))
	})
	if !slices.Equal(s.Devices, []string{devs[0].UUID}) {
		t.Errorf("the container sees GPUs %v, want only the assigned %s", s.Devices, devs[0].UUID)
	}
	chainCheckMemory(t, pod.Name, s, 8192)

	// CDI mode (the default): the GPU and the container's limiter device come
	// as CDI devices and NVIDIA_VISIBLE_DEVICES is void; the limiter device's
	// createRuntime hook ran when the container was created and left its image
	// report beside the container's preload file.
	wantCDI := []string{"nvidia.com/gpu=" + devs[0].UUID, "volcano-vgpu.io/limiter=" + string(pod.UID) + "_" + c.Name}
	if !slices.Equal(c.Response.CDIDevices, wantCDI) || c.Response.Envs[api.EnvVisibleDevices] != "void" {
		t.Errorf("CDI devices %v, %s=%q; want %v and void", c.Response.CDIDevices, api.EnvVisibleDevices, c.Response.Envs[api.EnvVisibleDevices], wantCDI)
	}
	if m, ok := c.Response.Mount(api.LdPreloadPath); !ok {
		t.Errorf("no %s mount", api.LdPreloadPath)
	} else if rep, err := preloadhook.ReadReport(filepath.Dir(m.HostPath)); err != nil || rep.Unlimited != "" {
		t.Errorf("image report of the preload hook: %+v, %v; want one that finds nothing unlimited", rep, err)
	}

	// A runtime that ignores NVIDIA_VISIBLE_DEVICES shows the container every
	// GPU of the node; libvcuda's config still keeps it to its own.
	t.Run("runtime exposes every GPU", func(t *testing.T) {
		c := c
		c.ExposeAllGPUs = true
		other := (idx + 1) % len(node.GPUs)
		for dev, wantMiB := range map[int]int64{idx: 8192, other: 0} {
			s, err := emu.RunWorkload(ctx, c, containeremu.Workload{Device: dev, ChunkMiB: 256})
			if err != nil {
				t.Fatal(err)
			}
			if len(s.Devices) != len(node.GPUs) || s.Devices[dev] != node.GPUs[dev].UUID {
				t.Errorf("device %d: the fake driver listed %v, want the node's %d GPUs", dev, s.Devices, len(node.GPUs))
			}
			if s.CUDATotalMiB != wantMiB || s.AllocatableMiB() != wantMiB || s.AllocError != containeremu.CUDAErrorOutOfMemory {
				t.Errorf("device %d (%s): total %d MiB, allocated %d MiB then CUresult %d; want %d MiB then OUT_OF_MEMORY",
					dev, node.GPUs[dev].UUID, s.CUDATotalMiB, s.AllocatableMiB(), s.AllocError, wantMiB)
			}
		}
	})
}

// chainFreeGPU is a GPU of the given model that no live pod is assigned.
func chainFreeGPU(t *testing.T, ctx context.Context, model string) string {
	t.Helper()
	pods, err := shared.kube.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	used := map[string]bool{}
	for _, p := range pods.Items {
		v, ok := p.Annotations[api.AssignmentKey]
		if !ok || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		if a, err := api.DecodeAssignment(v); err == nil {
			for _, c := range a.Containers {
				for _, d := range c.Devices {
					used[d.UUID] = true
				}
			}
		}
	}
	for _, n := range shared.cl.Nodes {
		for _, g := range n.GPUs {
			if strings.Contains(g.Model, model) && !used[g.UUID] {
				return g.UUID
			}
		}
	}
	t.Fatalf("no free %s GPU in the cluster", model)
	return ""
}

// TestChainTwoJobsShareOneGPU: two Jobs (8 GiB at 30%, 16 GiB at 70%) on the
// same GPU run at the same time: the simulated GPU's time splits 3:7, each
// container's memory cap holds on its own, and neither sees the other's
// memory (each holds some for its whole run while the other looks).
func TestChainTwoJobsShareOneGPU(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ns := newNamespace(t, ctx)
	uuid := chainFreeGPU(t, ctx, chainA100)
	pin := map[string]string{api.GPUUUIDIncludeKey: uuid}
	podA, devA := chainRunningPod(t, ctx, ns, "share30", 1, 8192, 30, pin)
	podB, devB := chainRunningPod(t, ctx, ns, "share70", 1, 16384, 70, pin)
	if devA[0].UUID != uuid || devB[0].UUID != uuid || podA.Spec.NodeName != podB.Spec.NodeName {
		t.Fatalf("not on the one GPU %s: %s got %s on %s, %s got %s on %s", uuid,
			podA.Name, devA[0].UUID, podA.Spec.NodeName, podB.Name, devB[0].UUID, podB.Spec.NodeName)
	}
	ca, cb := chainContainer(t, ctx, podA), chainContainer(t, ctx, podB)
	emu := chainEmulator(t)

	var sa, sb containeremu.Summary
	chainMeasure(t, "shares of 30% and 70% containers on one GPU", func() (bool, string) {
		// B first; A starts once B holds its 1 GiB, so A's first look sees B's
		// memory on the GPU; B's last look comes while A holds its 2 GiB.
		pb, err := emu.StartWorkload(ctx, cb, containeremu.Workload{ChunkMiB: 1, HoldMiB: 1024, Seconds: 2.5})
		if err != nil {
			t.Fatal(err)
		}
		if err := pb.WaitStderr(ctx, containeremu.HoldingMessage); err != nil {
			t.Fatal(err)
		}
		pa, err := emu.StartWorkload(ctx, ca, containeremu.Workload{ChunkMiB: 1, HoldMiB: 2048, Seconds: 2.5})
		if err != nil {
			t.Fatal(err)
		}
		if err := pa.WaitStderr(ctx, containeremu.HoldingMessage); err != nil {
			t.Fatal(err)
		}
		aHolds := time.Now()
		if sb, err = pb.Summary(); err != nil {
			t.Fatal(err)
		}
		bDone := time.Now()
		if sa, err = pa.Summary(); err != nil {
			t.Fatal(err)
		}
		a, b := chainShare(sa), chainShare(sb)
		detail := fmt.Sprintf("%.1f%% and %.1f%% of the GPU (A's part of the two: %.1f%%), want 30 and 70 ± 3", 100*a, 100*b, 100*a/(a+b))
		if !aHolds.Before(bDone) {
			return false, "B finished before A held its memory: the runs did not overlap; " + detail
		}
		return chainNear(a, 0.30) && chainNear(b, 0.70) && chainNear(a/(a+b), 0.30), detail
	})
	for _, s := range []containeremu.Summary{sa, sb} {
		if !slices.Equal(s.Devices, []string{uuid}) {
			t.Errorf("a container sees %v, want only %s", s.Devices, uuid)
		}
	}
	chainCheckMemory(t, podA.Name, sa, 8192)
	chainCheckMemory(t, podB.Name, sb, 16384)
}

// TestChainTwoGPUPod: a container given two GPUs sees both, by UUID, and
// nothing else of its node, with its cap on each.
func TestChainTwoGPUPod(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ns := newNamespace(t, ctx)
	pod, devs := chainRunningPod(t, ctx, ns, "pair", 2, 4096, 25, nil)
	c := chainContainer(t, ctx, pod)
	emu := chainEmulator(t)
	want := []string{devs[0].UUID, devs[1].UUID}
	slices.Sort(want)
	for dev := range 2 {
		s, err := emu.RunWorkload(ctx, c, containeremu.Workload{Device: dev, ChunkMiB: 64})
		if err != nil {
			t.Fatal(err)
		}
		got := slices.Sorted(slices.Values(s.Devices))
		if !slices.Equal(got, want) {
			t.Errorf("device %d: the container sees %v on %s (%d GPUs), want exactly the assigned %v",
				dev, s.Devices, pod.Spec.NodeName, len(chainNode(t, pod.Spec.NodeName).GPUs), want)
		}
		if s.CUDATotalMiB != 4096 || s.AllocatableMiB() != 4096 || s.AllocError != containeremu.CUDAErrorOutOfMemory {
			t.Errorf("device %d: total %d MiB, allocated %d MiB then CUresult %d; want 4096 MiB then OUT_OF_MEMORY",
				dev, s.CUDATotalMiB, s.AllocatableMiB(), s.AllocError)
		}
	}
}
