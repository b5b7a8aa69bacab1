package main

import (
	"context"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/memguard"
	"github.com/volcano-vgpu/volcano-vgpu/e2e/containeremu"
)

// tamper shows that a tenant cannot raise its own memory cap: in container r
// (its cap capMiB) one process holds three quarters of the cap, a second
// removes the files it shares with libvcuda, which then books it from zero,
// and takes the whole cap again; the node's memory guard, which reads
// NVML and maps the processes to their container through their cgroups,
// ends the second one. It prints what happened and the pod's Event.
func tamper(ctx context.Context, kube kubernetes.Interface, emu *containeremu.Emulator, r *inPod, ns string, capMiB int64) error {
	firstMiB := capMiB * 3 / 4
	fmt.Printf("A tenant lifts its own memory cap: in %s/%s one process holds %d MiB, then a second removes the files\n"+
		"it shares with libvcuda (they are writable in the container) and takes %d MiB more …\n", r.pod, r.container, firstMiB, capMiB)
	firstCtx, stopFirst := context.WithCancel(ctx)
	defer stopFirst()
	first, err := emu.StartWorkload(firstCtx, r.ctr, containeremu.Workload{ChunkMiB: 1, MaxAllocMiB: 1, HoldMiB: firstMiB, Seconds: 60})
	if err != nil {
		return err
	}
	if err := first.WaitStderr(ctx, containeremu.HoldingMessage); err != nil {
		return err
	}
	second, err := emu.StartWorkload(ctx, r.ctr, containeremu.Workload{ChunkMiB: 1, MaxAllocMiB: 1, HoldMiB: capMiB, Seconds: 60, UnlinkShared: true})
	if err != nil {
		return err
	}
	if err := second.WaitStderr(ctx, containeremu.HoldingMessage); err != nil {
		return fmt.Errorf("the second process never held %d MiB: %w", capMiB, err)
	}
	held := time.Now()
	fmt.Printf("It does: the container holds %d MiB under its %d MiB cap.\n", firstMiB+capMiB, capMiB)
	if err := second.WaitKilled(time.Minute); err != nil {
		return fmt.Errorf("the node's memory guard did not end the process over the cap: %w", err)
	}
	fmt.Printf("The node's memory guard killed that process %.1f s later; the first one runs on. The pod's Event:\n", time.Since(held).Seconds())
	for {
		evs, err := kube.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "reason=" + memguard.ReasonCapExceeded})
		if err != nil {
			return err
		}
		for _, e := range evs.Items {
			if string(e.InvolvedObject.UID) == r.ctr.PodUID { // this pod, not an earlier demo's of the same name
				fmt.Printf("  Warning %s: %s\n\n", e.Reason, e.Message)
				stopFirst()
				_, _ = first.Wait()
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("no %s Event on %s: %w", memguard.ReasonCapExceeded, r.pod, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}
