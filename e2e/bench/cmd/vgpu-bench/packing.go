package main

import (
	"context"
	"fmt"
	"time"

	"k8s.io/klog/v2"

	"github.com/volcano-vgpu/volcano-vgpu/api"
	"github.com/volcano-vgpu/volcano-vgpu/e2e/bench/metrics"
	"github.com/volcano-vgpu/volcano-vgpu/e2e/bench/reference"
	"github.com/volcano-vgpu/volcano-vgpu/e2e/bench/report"
	"github.com/volcano-vgpu/volcano-vgpu/e2e/bench/trace"
)

// capacityOf sums the published GPUs.
func capacityOf(nodes map[string]api.Inventory) trace.Capacity {
	var c trace.Capacity
	for _, inv := range nodes {
		for _, g := range inv.GPUs {
			c.GPUs++
			c.MemoryMiB += g.MemoryMiB
		}
	}
	return c
}

// makeTrace generates the trace (the default mix, or scaled to -load on
// the cluster's GPUs) and records its size and demand in in.
func makeTrace(f flags, nodes map[string]api.Inventory, in *report.Input) ([]trace.Job, error) {
	c := capacityOf(nodes)
	mix := trace.DefaultMix()
	if f.load > 0 {
		var err error
		if mix, err = trace.Scaled(f.seed, c, f.load); err != nil {
			return nil, err
		}
	}
	jobs, err := trace.Generate(f.seed, mix)
	if err != nil {
		return nil, err
	}
	in.Trace = trace.Sum(jobs)
	in.Load = report.Load{Asked: f.load, Demand: trace.DemandOf(jobs, c), Capacity: c}
	return jobs, nil
}

// packReference packs the trace offline and checks its packing the way the
// runs are checked.
func packReference(ctx context.Context, jobs []trace.Job, nodes map[string]api.Inventory) (*report.Reference, error) {
	start := time.Now()
	res, err := reference.Pack(jobs, nodes)
	if err != nil {
		return nil, fmt.Errorf("offline reference: %w", err)
	}
	ref := &report.Reference{Algorithm: string(res.Algorithm), MemoryMiB: map[string]int64{},
		Packing: metrics.Pack(nodes, res.Pods), Seconds: time.Since(start).Seconds()}
	for a, m := range res.MemoryMiB {
		ref.MemoryMiB[string(a)] = m
	}
	for _, p := range res.Pods {
		if p.Node != "" {
			ref.Pods++
		}
	}
	klog.FromContext(ctx).Info("Offline reference", "algorithm", ref.Algorithm, "pods", ref.Pods, "memoryGiB", ref.Packing.MemoryMiB/1024,
		"overBooked", ref.Packing.OverBooked, "seconds", ref.Seconds)
	return ref, nil
}
