// Package trace generates the benchmark's workload: a seeded, deterministic
// list of jobs (1-GPU fractions, whole GPUs, gangs of 2/4/8-GPU pods) in the
// order they are submitted. It is pure: no cluster, no clock.
package trace

import (
	"fmt"
	"math/rand/v2"
	"slices"
)

// Kind is what a job asks.
type Kind string

const (
	Fraction Kind = "fraction" // one pod, part of one GPU (memory MiB + core share)
	Whole    Kind = "whole"    // one pod, one whole GPU
	Gang     Kind = "gang"     // several pods of several whole GPUs each, all or nothing
)

// Job is one PodGroup and its pods; every pod has one container.
type Job struct {
	Index     int
	Name      string
	Kind      Kind
	Pods      int   // replicas; the PodGroup's minMember
	GPUs      int   // GPUs per pod
	MemoryMiB int64 // per GPU; 0 = the whole GPU's memory (vgpu-memory-percentage 100)
	Cores     int   // percent of each GPU; 100 = exclusive
	CPUMilli  int64 // per pod
	HostMiB   int64 // host memory per pod
}

// Mix says how many jobs of each kind a trace has.
type Mix struct {
	Fractions int         // 1-pod jobs asking a part of one GPU
	Wholes    int         // 1-pod jobs asking one whole GPU
	Gangs     map[int]int // GPUs per pod → number of gang jobs
	GangPods  int         // pods per gang job
}

// DefaultMix fills the benchmark cluster (e2e/sim/clusters/bench.yaml: 1,600 GPUs)
// to about 90% of its GPUs when packed well: 1,740 pods.
func DefaultMix() Mix {
	return Mix{Fractions: 1200, Wholes: 300, Gangs: map[int]int{2: 70, 4: 35, 8: 15}, GangPods: 2}
}

// Fraction sizes: MiB per GPU and core percent, drawn independently. The
// largest fits an L4 (23,034 MiB).
var (
	fractionMiB   = []int64{4096, 8192, 10240, 16384, 20480}
	fractionCores = []int{10, 20, 25, 30, 50}
)

// Generate returns the trace of mix for seed: the same seed and mix always
// give the same jobs in the same order.
func Generate(seed uint64, m Mix) ([]Job, error) {
	if m.Fractions < 0 || m.Wholes < 0 || m.GangPods < 1 {
		return nil, fmt.Errorf("trace mix %+v: expected non-negative counts and at least 1 pod per gang", m)
	}
	rng := rand.New(rand.NewPCG(seed, 0x76677075)) // "vgpu"
	var jobs []Job
	for range m.Fractions {
		jobs = append(jobs, Job{Kind: Fraction, Pods: 1, GPUs: 1,
			MemoryMiB: fractionMiB[rng.IntN(len(fractionMiB))], Cores: fractionCores[rng.IntN(len(fractionCores))],
			CPUMilli: 500, HostMiB: 2048})
	}
	for range m.Wholes {
		jobs = append(jobs, Job{Kind: Whole, Pods: 1, GPUs: 1, Cores: 100, CPUMilli: 1000, HostMiB: 4096})
	}
	sizes := make([]int, 0, len(m.Gangs))
	for g := range m.Gangs {
		if g < 1 || g > 8 || m.Gangs[g] < 0 {
			return nil, fmt.Errorf("trace mix: %d gangs of %d GPUs per pod: expected 1 to 8 GPUs and a non-negative count", m.Gangs[g], g)
		}
		sizes = append(sizes, g)
	}
	slices.Sort(sizes) // map order must not leak into the trace
	for _, g := range sizes {
		for range m.Gangs[g] {
			jobs = append(jobs, Job{Kind: Gang, Pods: m.GangPods, GPUs: g, Cores: 100, CPUMilli: 2000, HostMiB: 8192})
		}
	}
	rng.Shuffle(len(jobs), func(i, j int) { jobs[i], jobs[j] = jobs[j], jobs[i] })
	for i := range jobs {
		jobs[i].Index, jobs[i].Name = i, fmt.Sprintf("j%04d", i)
	}
	return jobs, nil
}

// Totals sums a trace.
type Totals struct {
	Jobs, Pods int
	// WholeGPUs is the whole GPUs asked (fractions not counted).
	WholeGPUs int
	// MultiGPUContainers is the containers asking more than one GPU.
	MultiGPUContainers int
}

// Sum totals jobs.
func Sum(jobs []Job) Totals {
	var t Totals
	for _, j := range jobs {
		t.Jobs++
		t.Pods += j.Pods
		if j.Kind != Fraction {
			t.WholeGPUs += j.Pods * j.GPUs
		}
		if j.GPUs > 1 {
			t.MultiGPUContainers += j.Pods
		}
	}
	return t
}
