package trace

import (
	"fmt"
	"math"
	"slices"
)

// Capacity is a cluster's GPUs.
type Capacity struct {
	GPUs      int
	MemoryMiB int64 // summed over the GPUs
}

// Demand is what a trace asks of a cluster, in two currencies, each as a
// share of the cluster's capacity (1 = exactly full when packed perfectly).
type Demand struct {
	// Memory: fractions' MiB plus every whole GPU asked at the cluster's
	// mean GPU memory.
	Memory float64
	// GPUs: whole GPUs plus, per fraction, the larger of its memory share of
	// a mean GPU and its core share (a GPU's cores sum to 100%).
	GPUs float64
}

// Least is the smaller of the two shares: a trace with Least ≥ 1.2 asks at
// least 120% of the cluster in both.
func (d Demand) Least() float64 { return min(d.Memory, d.GPUs) }

// DemandOf measures jobs against c.
func DemandOf(jobs []Job, c Capacity) Demand {
	if c.GPUs == 0 || c.MemoryMiB == 0 {
		return Demand{}
	}
	mean := float64(c.MemoryMiB) / float64(c.GPUs)
	var mem, gpus float64
	for _, j := range jobs {
		n := float64(j.Pods * j.GPUs)
		if j.Kind == Fraction {
			mem += n * float64(j.MemoryMiB)
			gpus += n * max(float64(j.MemoryMiB)/mean, float64(j.Cores)/100)
			continue
		}
		mem += n * mean
		gpus += n
	}
	return Demand{Memory: mem / float64(c.MemoryMiB), GPUs: gpus / float64(c.GPUs)}
}

// Scaled is DefaultMix with every count multiplied by the same factor so
// that its least demand on c is at least load: load 1.3 oversubscribes both
// memory and GPUs by 30% or more, load 0.5 fills half. The factor is found
// from the demand the default mix's trace for seed has on c, then raised by
// 1% steps until the scaled trace for seed reaches load.
func Scaled(seed uint64, c Capacity, load float64) (Mix, error) {
	if load <= 0 || c.GPUs == 0 {
		return Mix{}, fmt.Errorf("scaled trace: load %.2f on %d GPUs: expected a positive load and GPUs", load, c.GPUs)
	}
	base := DefaultMix()
	jobs, err := Generate(seed, base)
	if err != nil {
		return Mix{}, err
	}
	least := DemandOf(jobs, c).Least()
	for f := load / least; ; f *= 1.01 { // rounding may leave it just short
		m := scaleMix(base, f)
		jobs, err := Generate(seed, m)
		if err != nil {
			return Mix{}, err
		}
		if DemandOf(jobs, c).Least() >= load {
			return m, nil
		}
	}
}

func scaleMix(m Mix, f float64) Mix {
	up := func(n int) int { return int(math.Ceil(float64(n) * f)) }
	out := Mix{Fractions: up(m.Fractions), Wholes: up(m.Wholes), Gangs: map[int]int{}, GangPods: m.GangPods}
	sizes := make([]int, 0, len(m.Gangs))
	for g := range m.Gangs {
		sizes = append(sizes, g)
	}
	slices.Sort(sizes)
	for _, g := range sizes {
		out.Gangs[g] = up(m.Gangs[g])
	}
	return out
}
