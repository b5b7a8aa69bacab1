//go:build e2e

package tests

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/volcano-vgpu/volcano-vgpu/api"
	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/cdi"
	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/migledger"
	"github.com/volcano-vgpu/volcano-vgpu/e2e/cluster"
	"github.com/volcano-vgpu/volcano-vgpu/e2e/containeremu"
	"github.com/volcano-vgpu/volcano-vgpu/e2e/kubeletemu"
	"github.com/volcano-vgpu/volcano-vgpu/e2e/sim/nvmlsim"
)

// migInstances is what node's inventory publishes of GPU uuid's MIG
// instances; nil when the GPU publishes no MIG state.
func migInstances(t *testing.T, ctx context.Context, node, uuid string) []api.MIGInstance {
	t.Helper()
	for _, g := range inventories(t, ctx)[node].GPUs {
		if g.UUID == uuid && g.MIG != nil {
			return g.MIG.Instances
		}
	}
	return nil
}

// TestScenarioMIG: an A100 node whose last GPU has MIG mode on (the
// simulated NVML turns it on as the node's plugin starts) and is given mode
// mig on demand (the device plugin's sharing.gpus, by UUID); its other GPUs
// stay time-sliced. Volcano's Dynamic MIG example (volcano.sh/vgpu-mode: mig
// with vgpu-memory 8000) and a fractional Job both run on the node, each on
// the right GPU: the MIG pod on the MIG GPU, on an instance the device
// plugin creates at the placement the scheduler chose (published in the
// inventory), handed to its container in CDI mode, as the simulated cluster
// runs, through the plugin's own spec (volcano-vgpu.io/mig=<pod UID>_<container>_<MIG
// UUID>: the GPU's node, the instance's capability nodes from the node's
// mig-minors, nvidiactl, nvidia-uvm), with a limiter config that caps memory
// only, and a workload in it (the container emulator, which resolves the
// name from the node's CDI directory) sees that device alone and is refused
// past its ask; the fractional pod on a time-sliced GPU. A pod naming the
// 1g.10gb profile with 4096 MiB is refused past 4096 MiB, not past the
// instance's memory. The node's device plugin restarts with both pods
// running and its instance ledger lost: the simulated NVML keeps the
// instances (as a GPU does), and the plugin adopts them again for their
// pods. Deleting the Jobs destroys their instances: the inventory no longer
// lists them. A create the simulated NVML refuses fails the pod with NVML's
// reason; it is handed back and runs when its Job creates it again.
func TestScenarioMIG(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	const node, migIndex = "a100-40g-1", 7
	start := time.Now()
	waitNodeFree(t, ctx, node)
	gpus := inventories(t, ctx)[node].GPUs
	migGPU := gpus[migIndex].UUID

	migConfig := "sharing:\n  gpus:\n    " + migGPU + ": mig\n"
	restartPluginWithMIG(t, ctx, node, migConfig, []int{migIndex})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		restartPluginWith(t, ctx, node, "") // MIG off again, every GPU time-sliced
	})
	ns := newNamespace(t, ctx) // its pods are gone before the plugin is restored
	waitFor(t, ctx, "GPU "+fmt.Sprint(migIndex)+" of "+node+" published in mig mode", func() error {
		for _, g := range inventories(t, ctx)[node].GPUs {
			want := api.ModeTimeSliced
			if g.UUID == migGPU {
				want = api.ModeMIG
			}
			if g.SharingMode() != want || !g.Healthy {
				return fmt.Errorf("%s: mode %s, healthy %t; want %s, healthy", g.UUID, g.SharingMode(), g.Healthy, want)
			}
			if want == api.ModeMIG && (g.MIG == nil || g.MIG.Geometry != api.MIGOnDemand || len(g.MIG.Instances) != 0) {
				return fmt.Errorf("%s: MIG state %+v, want on-demand without instances", g.UUID, g.MIG)
			}
		}
		return nil
	})

	// Volcano's Dynamic MIG example, as a Job, and a fractional Job.
	createJob(t, ctx, pinJob(gpuJob(ns, "mig", 1, 1, 8000, 0, map[string]string{api.VolcanoModeKey: "mig"}), node))
	createJob(t, ctx, pinJob(gpuJob(ns, "frac", 1, 1, 2048, 25, nil), node))
	// a 1g.10gb instance capped at 4096 MiB, less than the instance's memory
	const capMiB = 4096
	createJob(t, ctx, pinJob(gpuJob(ns, "cap", 1, 1, capMiB, 0, map[string]string{api.VolcanoModeKey: "mig", api.MIGProfileKey: "1g.10gb"}), node))
	migPod := waitJobRunning(t, ctx, ns, "mig", 1)[0]
	fracPod := waitJobRunning(t, ctx, ns, "frac", 1)[0]
	capPod := waitJobRunning(t, ctx, ns, "cap", 1)[0]

	if on := gpusOf(t, fracPod); len(on) != 1 || on[0] == migGPU {
		t.Errorf("the fractional pod runs on %v, want one time-sliced GPU (not the MIG GPU %s)", on, migGPU)
	}
	if got := waitAllocated(t, ctx, fracPod).Containers[0].Response.GPUs(); slices.Contains(got, migGPU) || len(got) != 1 || strings.HasPrefix(got[0], "MIG-") {
		t.Errorf("the fractional pod's container gets %v, want one whole GPU's share", got)
	}

	devs := podAssignment(t, migPod).Containers[0].Devices
	if len(devs) != 1 || devs[0].UUID != migGPU || devs[0].MIG == nil {
		t.Fatalf("the MIG pod is assigned %+v, want a MIG instance of %s", devs, migGPU)
	}
	want := devs[0].MIG
	inst := instanceOf(t, ctx, node, migGPU, *want)
	rec := waitAllocated(t, ctx, migPod).Containers[0]
	resp := rec.Response
	if got := resp.GPUs(); !slices.Equal(got, []string{inst.UUID}) {
		t.Errorf("the MIG pod's container gets %v, want its MIG device %s", got, inst.UUID)
	}
	checkMIGSpec(t, node, string(migPod.UID), rec, inst.UUID, migIndex)
	lc := limiterConfig(t, resp)
	if len(lc.Devices) != 1 || lc.Devices[0].UUID != inst.UUID || lc.Devices[0].MemoryLimitBytes != uint64(devs[0].MemoryMiB)<<20 || lc.Devices[0].CorePercent != 100 {
		t.Errorf("the MIG pod's limiter config %+v: want its MIG device %s capped at its ask, %d MiB, no launch throttle (100)", lc.Devices, inst.UUID, devs[0].MemoryMiB)
	}
	t.Logf("Dynamic MIG example: %s at memory slices %v, MIG device %s; fractional pod on %v", want.Profile, want.Placement, inst.UUID, gpusOf(t, fracPod))

	// In the container: the MIG device alone, its profile's memory, capped there.
	c := chainContainer(t, ctx, migPod)
	c.NodeMIG = containeremu.MIGDevices(inventories(t, ctx)[node])
	s, err := chainEmulator(t).RunWorkload(ctx, c, containeremu.Workload{ChunkMiB: 1})
	if err != nil {
		t.Fatal(err)
	}
	// CUDA reports a device's 16 UUID bytes; the workload prints them as GPU-…
	if len(s.Devices) != 1 || strings.TrimPrefix(s.Devices[0], "GPU-") != strings.TrimPrefix(inst.UUID, "MIG-") {
		t.Errorf("the MIG container's driver lists %v, want its MIG device %s alone", s.Devices, inst.UUID)
	}
	chainCheckMemory(t, "the MIG container", s, devs[0].MemoryMiB)

	// The 1g.10gb pod asking 4096 MiB: its instance has more, libvcuda caps it at the ask.
	capDevs := podAssignment(t, capPod).Containers[0].Devices
	if len(capDevs) != 1 || capDevs[0].MIG == nil || capDevs[0].MIG.Profile != "1g.10gb" || capDevs[0].MemoryMiB != capMiB {
		t.Fatalf("the 1g.10gb pod is assigned %+v, want a 1g.10gb instance capped at %d MiB", capDevs, capMiB)
	}
	capInst := instanceOf(t, ctx, node, migGPU, *capDevs[0].MIG)
	cc := chainContainer(t, ctx, capPod)
	cc.NodeMIG = containeremu.MIGDevices(inventories(t, ctx)[node])
	if i := slices.IndexFunc(cc.NodeMIG, func(g containeremu.GPU) bool { return g.UUID == capInst.UUID }); i < 0 || cc.NodeMIG[i].MemoryMiB <= capMiB {
		t.Fatalf("the 1g.10gb instance %s: the node's MIG devices %+v, want it with more than %d MiB", capInst.UUID, cc.NodeMIG, capMiB)
	}
	cs, err := chainEmulator(t).RunWorkload(ctx, cc, containeremu.Workload{ChunkMiB: 1})
	if err != nil {
		t.Fatal(err)
	}
	chainCheckMemory(t, "the 1g.10gb container asking 4096 MiB", cs, capMiB)

	// The node's device plugin restarts, its ledger of instances lost: the
	// instances are still there and it adopts them for their pods again.
	ledger := filepath.Join(shared.cl.Config.NodeDir(node), "state", migledger.File)
	restartPluginLosing(t, ctx, node, migConfig, []int{migIndex}, ledger)
	restarted := time.Now()
	waitFor(t, ctx, "both instances adopted after the plugin's restart", func() error {
		l, err := migledger.Load(ledger)
		if err != nil {
			return err
		}
		for _, w := range []struct {
			pod  string
			inst api.MIGInstance
		}{{string(migPod.UID), inst}, {string(capPod.UID), capInst}} {
			e, ok := l.Get(migledger.Key{GPU: migGPU, Placement: w.inst.Placement})
			if !ok || e.UUID != w.inst.UUID || e.PodUID != w.pod || !e.Created {
				return fmt.Errorf("ledger entry at %v: %+v (found %t), want %s created for pod %s", w.inst.Placement, e, ok, w.inst.UUID, w.pod)
			}
		}
		return nil
	})
	t.Logf("instances adopted %s after the plugin's restart", time.Since(restarted).Round(100*time.Millisecond))
	if ins := migInstances(t, ctx, node, migGPU); !slices.ContainsFunc(ins, func(i api.MIGInstance) bool { return i.UUID == inst.UUID }) ||
		!slices.ContainsFunc(ins, func(i api.MIGInstance) bool { return i.UUID == capInst.UUID }) {
		t.Errorf("instances after the restart %+v, want %s and %s still there", ins, inst.UUID, capInst.UUID)
	}
	for _, p := range []string{migPod.Name, capPod.Name} {
		got, err := shared.kube.CoreV1().Pods(ns).Get(ctx, p, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got.Status.Phase != corev1.PodRunning {
			t.Errorf("pod %s after the restart: %s, want still running", p, got.Status.Phase)
		}
	}

	// Deleting the MIG Jobs destroys their instances.
	for _, j := range []string{"mig", "cap"} {
		if err := shared.vc.BatchV1alpha1().Jobs(ns).Delete(ctx, j, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	deleted := time.Now()
	waitFor(t, ctx, "the MIG Jobs' instances destroyed", func() error {
		if ins := migInstances(t, ctx, node, migGPU); len(ins) != 0 {
			return fmt.Errorf("instances %+v", ins)
		}
		return nil
	})
	t.Logf("instances gone from the inventory %s after the Jobs' deletion", time.Since(deleted).Round(100*time.Millisecond))

	// A create NVML refuses: the pod is refused with NVML's reason, handed
	// back (allocate.reschedule) and runs when its Job creates it again.
	injectFault(t, node, fmt.Sprintf("%d fail-mig-create", migIndex))
	time.Sleep(1500 * time.Millisecond) // the plugin reads the injection file every 500ms
	// beside a fractional task, so the Job runs while its MIG pod is handed
	// back (a Volcano Job creates a deleted pod again while it runs)
	retry := gpuJob(ns, "retry", 1, 1, 8000, 0, map[string]string{api.VolcanoModeKey: "mig"})
	other := gpuJob(ns, "x", 1, 1, 2048, 25, nil).Spec.Tasks[0]
	other.Name = "frac"
	retry.Spec.Tasks = append(retry.Spec.Tasks, other)
	retry.Spec.MinAvailable = 2
	createJob(t, ctx, pinJob(retry, node))
	const first = "retry-worker-0"
	ev := rescheduleEvent(t, ctx, ns, first)
	for _, want := range []string{"cannot create the MIG instance", "memory slices held by another MIG instance"} {
		if !strings.Contains(ev.Message, want) {
			t.Errorf("the event on %s does not say %q: %s", first, want, ev.Message)
		}
	}
	for _, p := range waitJobRunning(t, ctx, ns, "retry", 2) {
		if p.Name == first && p.UID == ev.InvolvedObject.UID {
			t.Errorf("%s runs as the pod that was refused (uid %s), want a new one", first, p.UID)
		}
	}
	waitFor(t, ctx, "the retried pod's instance in the inventory", func() error {
		if ins := migInstances(t, ctx, node, migGPU); len(ins) != 1 || ins[0].UUID == "" {
			return fmt.Errorf("instances %+v, want one", ins)
		}
		return nil
	})
	t.Logf("scenario took %s", time.Since(start).Round(time.Second))
}

// instanceOf waits for the instance of GPU uuid at m's placement in node's
// inventory.
func instanceOf(t *testing.T, ctx context.Context, node, uuid string, m api.MIGDevice) api.MIGInstance {
	t.Helper()
	var inst api.MIGInstance
	waitFor(t, ctx, "the "+m.Profile+" instance in the inventory", func() error {
		for _, in := range migInstances(t, ctx, node, uuid) {
			if in.Placement == m.Placement && in.Profile == m.Profile && in.UUID != "" {
				inst = in
				return nil
			}
		}
		return fmt.Errorf("no %s instance at %v yet: %+v", m.Profile, m.Placement, migInstances(t, ctx, node, uuid))
	})
	return inst
}

// checkMIGSpec checks that the container of rec got its MIG device mig
// through the device plugin's own CDI spec in node's CDI directory, not the
// NVIDIA toolkit's: the GPU's node (minor gpuMinor), the capability nodes of
// one GPU instance and its compute instance 0 as the node's mig-minors
// number them, nvidiactl and nvidia-uvm, and NVIDIA_VISIBLE_DEVICES; and
// the simulated toolkit spec's driver library mount at the spec's level.
func checkMIGSpec(t *testing.T, node, podUID string, rec kubeletemu.ContainerRecord, mig string, gpuMinor int) {
	t.Helper()
	name := podUID + "_" + rec.Name + "_" + mig
	if !slices.Contains(rec.Response.CDIDevices, cdi.MIGKind+"="+name) || slices.ContainsFunc(rec.Response.CDIDevices, func(n string) bool { return strings.HasPrefix(n, cdi.DefaultKind+"=") }) {
		t.Errorf("the MIG container's CDI devices %q: want %s=%s and none of the toolkit's", rec.Response.CDIDevices, cdi.MIGKind, name)
	}
	c := shared.cl.Config
	sp, err := cdi.Specs{Dir: containeremu.DefaultConfig(c.Root, c.SocketDir).NodeCDISpecDir(node)}.ReadMIG(podUID, rec.Name)
	if err != nil {
		t.Fatalf("the MIG container's CDI spec: %v", err)
	}
	if len(sp.Devices) != 1 || sp.Devices[0].Name != name || !slices.Equal(sp.Devices[0].ContainerEdits.Env, []string{"NVIDIA_VISIBLE_DEVICES=" + mig}) {
		t.Fatalf("the MIG container's CDI spec %+v: want device %s with NVIDIA_VISIBLE_DEVICES=%s", sp, name, mig)
	}
	lib := cdi.Mount{HostPath: cluster.SimDriverLibrary, ContainerPath: cluster.SimDriverLibrary, Options: []string{"ro", "nosuid", "nodev", "bind"}}
	if sp.ContainerEdits == nil || !slices.ContainsFunc(sp.ContainerEdits.Mounts, func(m cdi.Mount) bool { return cmp.Equal(m, lib) }) ||
		slices.ContainsFunc(sp.ContainerEdits.Env, func(e string) bool { return strings.HasPrefix(e, "NVIDIA_VISIBLE_DEVICES=") }) {
		t.Errorf("the MIG container's CDI spec-level edits %+v: want the toolkit spec's driver library %s and not its NVIDIA_VISIBLE_DEVICES", sp.ContainerEdits, cluster.SimDriverLibrary)
	}
	var got []string
	for _, n := range sp.Devices[0].ContainerEdits.DeviceNodes {
		got = append(got, n.Path)
	}
	for gi := 1; gi < 15; gi++ {
		want := []string{fmt.Sprintf("/dev/nvidia%d", gpuMinor), fmt.Sprintf("/dev/nvidia-caps/nvidia-cap%d", nvmlsim.MIGMinor(gpuMinor, gi, -1)),
			fmt.Sprintf("/dev/nvidia-caps/nvidia-cap%d", nvmlsim.MIGMinor(gpuMinor, gi, 0)), "/dev/nvidiactl", "/dev/nvidia-uvm"}
		if slices.Equal(got, want) {
			t.Logf("MIG device %s: GPU instance %d, device nodes %v", mig, gi, got)
			return
		}
	}
	t.Errorf("the MIG container's device nodes %v: want /dev/nvidia%d, the capabilities of one GPU instance of GPU %d and its compute instance 0, nvidiactl, nvidia-uvm", got, gpuMinor, gpuMinor)
}

// restartPluginLosing restarts node's device plugin as restartPluginWithMIG
// does, removing the file lost while it is down (a crash that loses it).
func restartPluginLosing(t *testing.T, ctx context.Context, node, extra string, migGPUs []int, lost string) {
	t.Helper()
	cfg := shared.cl.Config
	cfg.DevicePluginNodeConfig = map[string]string{node: extra}
	cfg.DevicePluginNodeMIG = map[string][]int{node: migGPUs}
	if _, err := killComponent(cluster.DevicePluginName(node)); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(lost); err != nil {
		t.Fatal(err)
	}
	if _, err := cluster.Up(ctx, cfg); err != nil {
		t.Fatal(err)
	}
}
