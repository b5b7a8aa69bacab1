//go:build e2e

package tests

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/memguard"
	"github.com/volcano-vgpu/volcano-vgpu/e2e/containeremu"
)

// TestMemoryGuardOnTheCluster: a tenant lifts its own memory cap by removing
// the files it shares with libvcuda (its container holds 6000 + 8192 MiB
// under an 8192 MiB cap); its node's device plugin finds both processes
// through their cgroups and the container ID the pod's status reports (as
// on a real node with hostPID), kills the larger holder, posts
// GPUMemoryCapExceeded on the pod and counts the kill; the other process
// runs on.
func TestMemoryGuardOnTheCluster(t *testing.T) {
	s := runningA30(t, "tamper", 8192)
	ctx, ns, pod, c, emu := s.ctx, s.ns, s.pod, s.c, s.emu
	name := pod.Spec.Containers[0].Name
	if want := "containerd://" + containeremu.ContainerID(string(pod.UID), name); len(pod.Status.ContainerStatuses) == 0 || pod.Status.ContainerStatuses[0].ContainerID != want {
		t.Fatalf("pod %s reports container statuses %+v, want %s's ID %s (the simulated kubelet's, e2e/sim/kwok-stages.yaml)", pod.Name, pod.Status.ContainerStatuses, name, want)
	}

	firstCtx, stopFirst := context.WithCancel(ctx)
	defer stopFirst()
	first, err := emu.StartWorkload(firstCtx, c, containeremu.Workload{ChunkMiB: 1, MaxAllocMiB: 1, HoldMiB: 6000, Seconds: 60})
	if err != nil {
		t.Fatal(err)
	}
	if err := first.WaitStderr(ctx, containeremu.HoldingMessage); err != nil {
		t.Fatal(err)
	}
	tamperer, err := emu.StartWorkload(ctx, c, containeremu.Workload{ChunkMiB: 1, MaxAllocMiB: 1, HoldMiB: 8192, Seconds: 60, UnlinkShared: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := tamperer.WaitStderr(ctx, containeremu.HoldingMessage); err != nil {
		t.Fatalf("the tamperer never held 8192 MiB beside 6000 (libvcuda refused it: the tamper did not work): %v", err)
	}
	held := time.Now()
	if err := tamperer.WaitKilled(time.Minute); err != nil {
		t.Fatalf("the tamperer (8192 MiB beside 6000 under an 8192 MiB cap) was not killed by the node's memory guard: %v", err)
	}
	t.Logf("the memory guard killed the tamperer %.1f s after it held 14,192 MiB under its 8192 MiB cap (simulated cluster)", time.Since(held).Seconds())
	if err := syscall.Kill(first.Pid(), 0); err != nil {
		t.Errorf("the first process (6000 MiB, within the cap) is gone too: %v", err)
	}

	waitFor(t, ctx, "the GPUMemoryCapExceeded event on "+pod.Name, func() error {
		evs, err := shared.kube.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "reason=" + memguard.ReasonCapExceeded})
		if err != nil {
			return err
		}
		for _, e := range evs.Items {
			if e.InvolvedObject.Name == pod.Name {
				t.Logf("event: %s", e.Message)
				return nil
			}
		}
		return fmt.Errorf("%d such events, none on %s", len(evs.Items), pod.Name)
	})
	// The guard's next period finds the first process alone, within the cap.
	waitFor(t, ctx, "the memory guard's series of "+pod.Name+" after the kill", func() error {
		m, err := containerSeries(ctx, pod.Spec.NodeName, pod.Name)
		if err != nil {
			return err
		}
		kills, heldMiB := m["volcano_vgpu_memory_guard_kills_total"], m["volcano_vgpu_container_memory_held_bytes"]/(1<<20)
		if kills != 1 || heldMiB < 6000 || heldMiB > 6000+1024 {
			return fmt.Errorf("kills %v (want 1), held %.0f MiB (want the first process's 6000 and its context)", kills, heldMiB)
		}
		return nil
	})
	stopFirst()
	_, _ = first.Wait()
}

// TestUnlimitedProcessOnTheCluster: in a pod with a 30% share, a process
// whose loader ignores /etc/ld.so.preload (as a static or musl program's
// does) runs beside one with libvcuda. Its node's device plugin reads each
// process's memory map through the host's /proc, finds the one without the
// limiter, and reports it (memoryGuard.unlimitedProcesses: report, the
// default): a GPULimiterBypassed Warning Event on the pod and
// volcano_vgpu_container_unlimited_processes 1; it kills neither.
func TestUnlimitedProcessOnTheCluster(t *testing.T) {
	s := runningA30(t, "unlimited", 4096)
	ctx, ns, pod, c, emu := s.ctx, s.ns, s.pod, s.c, s.emu

	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	limited, err := emu.StartWorkload(runCtx, c, containeremu.Workload{ChunkMiB: 1, MaxAllocMiB: 1, HoldMiB: 1000, Seconds: 60})
	if err != nil {
		t.Fatal(err)
	}
	bare := c
	bare.IgnoresPreload = true
	unlimited, err := emu.StartWorkload(runCtx, bare, containeremu.Workload{ChunkMiB: 1, MaxAllocMiB: 1, HoldMiB: 1000, Seconds: 60})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []*containeremu.Process{limited, unlimited} {
		if err := p.WaitStderr(ctx, containeremu.HoldingMessage); err != nil {
			t.Fatal(err)
		}
	}
	started := time.Now()
	waitFor(t, ctx, "the GPULimiterBypassed event on "+pod.Name, func() error {
		evs, err := shared.kube.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "reason=" + memguard.ReasonLimiterBypassed})
		if err != nil {
			return err
		}
		for _, e := range evs.Items {
			if e.InvolvedObject.Name != pod.Name {
				continue
			}
			if want := fmt.Sprintf("Process %d (host pid)", unlimited.Pid()); !strings.Contains(e.Message, want) {
				return fmt.Errorf("event %q does not name the unlimited process: want %q", e.Message, want)
			}
			t.Logf("event %.1f s after both held their memory: %s", time.Since(started).Seconds(), e.Message)
			return nil
		}
		return fmt.Errorf("%d such events, none on %s", len(evs.Items), pod.Name)
	})
	waitFor(t, ctx, "the unlimited-process series of "+pod.Name, func() error {
		m, err := containerSeries(ctx, pod.Spec.NodeName, pod.Name)
		if err != nil {
			return err
		}
		if n := m["volcano_vgpu_container_unlimited_processes"]; n != 1 {
			return fmt.Errorf("volcano_vgpu_container_unlimited_processes %v, want 1", n)
		}
		return nil
	})
	for name, p := range map[string]*containeremu.Process{"the preloaded process": limited, "the unlimited one (report only)": unlimited} {
		if err := syscall.Kill(p.Pid(), 0); err != nil {
			t.Errorf("%s is gone: %v", name, err)
		}
	}
	stop()
	_, _ = limited.Wait()
	_, _ = unlimited.Wait()
}
