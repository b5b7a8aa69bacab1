//go:build e2e

package tests

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/volcano-vgpu/volcano-vgpu/api"
	"github.com/volcano-vgpu/volcano-vgpu/e2e/containeremu"
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
// inventory), handed to its container as the MIG device (CDI
// nvidia.com/gpu=<MIG UUID>) with a limiter config that caps memory only,
// and a workload in it (the container emulator) sees that device alone with
// the profile's memory and is refused past it;
// the fractional pod on a time-sliced GPU. Deleting the MIG Job destroys
// its instance: the inventory no longer lists it. A create the simulated
// NVML refuses fails the pod with NVML's reason; it is handed back and runs
// when its Job creates it again.
func TestScenarioMIG(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	const node, migIndex = "a100-40g-1", 7
	waitNodeFree(t, ctx, node)
	gpus := inventories(t, ctx)[node].GPUs
	migGPU := gpus[migIndex].UUID

	restartPluginWithMIG(t, ctx, node, "sharing:\n  gpus:\n    "+migGPU+": mig\n", []int{migIndex})
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
	migPod := waitJobRunning(t, ctx, ns, "mig", 1)[0]
	fracPod := waitJobRunning(t, ctx, ns, "frac", 1)[0]

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
	var inst api.MIGInstance
	waitFor(t, ctx, "the MIG pod's instance in the inventory", func() error {
		for _, in := range migInstances(t, ctx, node, migGPU) {
			if in.Placement == want.Placement && in.Profile == want.Profile && in.UUID != "" {
				inst = in
				return nil
			}
		}
		return fmt.Errorf("no %s instance at %v yet: %+v", want.Profile, want.Placement, migInstances(t, ctx, node, migGPU))
	})
	resp := waitAllocated(t, ctx, migPod).Containers[0].Response
	if got := resp.GPUs(); !slices.Equal(got, []string{inst.UUID}) {
		t.Errorf("the MIG pod's container gets %v, want its MIG device %s", got, inst.UUID)
	}
	lc := limiterConfig(t, resp)
	if len(lc.Devices) != 1 || lc.Devices[0].UUID != inst.UUID || lc.Devices[0].MemoryLimitBytes != uint64(devs[0].MemoryMiB)<<20 || lc.Devices[0].CorePercent != 100 {
		t.Errorf("the MIG pod's limiter config %+v: want its MIG device %s capped at the %s's %d MiB, no launch throttle (100)", lc.Devices, inst.UUID, want.Profile, devs[0].MemoryMiB)
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

	// Deleting the MIG Job destroys its instance.
	if err := shared.vc.BatchV1alpha1().Jobs(ns).Delete(ctx, "mig", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	deleted := time.Now()
	waitFor(t, ctx, "the MIG Job's instance destroyed", func() error {
		if ins := migInstances(t, ctx, node, migGPU); len(ins) != 0 {
			return fmt.Errorf("instances %+v", ins)
		}
		return nil
	})
	t.Logf("instance gone from the inventory %s after the Job's deletion", time.Since(deleted).Round(100*time.Millisecond))

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
}
