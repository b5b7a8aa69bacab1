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
	msg, err := podEvent(ctx, kube, ns, memguard.ReasonCapExceeded, r)
	if err != nil {
		return err
	}
	fmt.Printf("  Warning %s: %s\n\n", memguard.ReasonCapExceeded, msg)
	stopFirst()
	_, _ = first.Wait()
	return nil
}

// unlimited shows a program that never loads libvcuda (a static or musl
// binary: its loader ignores /etc/ld.so.preload) in container r: the node
// finds it by its memory map and reports it on the pod (the default action).
func unlimited(ctx context.Context, kube kubernetes.Interface, emu *containeremu.Emulator, r *inPod, ns string) error {
	fmt.Printf("A program that does not load libvcuda (a static or musl binary) starts in %s/%s: nothing in it holds it\n"+
		"to the container's compute share …\n", r.pod, r.container)
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	bare := r.ctr
	bare.IgnoresPreload = true
	p, err := emu.StartWorkload(runCtx, bare, containeremu.Workload{ChunkMiB: 1, MaxAllocMiB: 1, HoldMiB: 256, Seconds: 60})
	if err != nil {
		return err
	}
	if err := p.WaitStderr(ctx, containeremu.HoldingMessage); err != nil {
		return err
	}
	started := time.Now()
	msg, err := podEvent(ctx, kube, ns, memguard.ReasonLimiterBypassed, r)
	if err != nil {
		return err
	}
	fmt.Printf("The node found it by its memory map %.1f s later (memoryGuard.unlimitedProcesses: report; kill would end it):\n"+
		"  Warning %s: %s\n\n", time.Since(started).Seconds(), memguard.ReasonLimiterBypassed, msg)
	stop()
	_, _ = p.Wait()
	return nil
}

// podEvent waits for the first Event of reason on r's pod and returns its message.
func podEvent(ctx context.Context, kube kubernetes.Interface, ns, reason string, r *inPod) (string, error) {
	for {
		evs, err := kube.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "reason=" + reason})
		if err != nil {
			return "", err
		}
		for _, e := range evs.Items {
			if string(e.InvolvedObject.UID) == r.ctr.PodUID { // this pod, not an earlier demo's of the same name
				return e.Message, nil
			}
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("no %s Event on %s: %w", reason, r.pod, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}
