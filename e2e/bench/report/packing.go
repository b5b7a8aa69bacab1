package report

import (
	"github.com/volcano-vgpu/volcano-vgpu/e2e/bench/metrics"
	"github.com/volcano-vgpu/volcano-vgpu/e2e/bench/runner"
	"github.com/volcano-vgpu/volcano-vgpu/e2e/bench/trace"
)

// Reference is the offline packing of the same trace on the same
// inventories (package e2e/bench/reference).
type Reference struct {
	Algorithm string
	// MemoryMiB is the GPU memory each algorithm placed.
	MemoryMiB map[string]int64
	Pods      int // pods placed
	Packing   metrics.Packing
	Seconds   float64 // time to compute every algorithm
}

// Load is what the trace asks of the cluster.
type Load struct {
	// Asked is the requested least demand (the -load flag); 0: the fixed
	// default mix.
	Asked    float64
	Demand   trace.Demand
	Capacity trace.Capacity
}

// PackingRow is one setup's packing against the reference: medians for the
// schedulers, the one packing for the reference.
type PackingRow struct {
	Setup      string
	Pods       float64 // placed (bound)
	MemoryGiB  float64
	OfCluster  float64 // MemoryMiB / the cluster's GPU memory
	OfRef      float64 // MemoryMiB / the reference's
	GPUsUsed   float64
	PartlyUsed float64
	OverBooked float64
	Measured   bool // a scheduler that bound something
}

// ReferenceName is the reference's row name.
const ReferenceName = "offline reference"

// PackingRows compares every GPU setup with the reference.
func PackingRows(results []runner.Result, ref *Reference, c trace.Capacity) []PackingRow {
	if ref == nil {
		return nil
	}
	refMiB := float64(ref.Packing.MemoryMiB)
	row := func(setup string, pods float64, p metrics.Packing, measured bool) PackingRow {
		r := PackingRow{Setup: setup, Pods: pods, MemoryGiB: float64(p.MemoryMiB) / 1024, GPUsUsed: float64(p.GPUsUsed),
			PartlyUsed: float64(p.PartlyUsed), OverBooked: float64(p.OverBooked), Measured: measured}
		if c.MemoryMiB > 0 {
			r.OfCluster = float64(p.MemoryMiB) / float64(c.MemoryMiB)
		}
		if refMiB > 0 {
			r.OfRef = float64(p.MemoryMiB) / refMiB
		}
		return r
	}
	var rows []PackingRow
	for _, s := range Summarize(results) {
		if s.Setup == CPUOnly || s.Setup == NoGPUPlugin { // no GPU chosen
			continue
		}
		r := row(s.Setup, s.Bound, metrics.Packing{MemoryMiB: int64(s.MemoryMiB), GPUsUsed: int(s.GPUsUsed), PartlyUsed: int(s.PartlyUsed), OverBooked: int(s.OverBooked)}, s.GPU)
		rows = append(rows, r)
	}
	return append(rows, row(ReferenceName, float64(ref.Pods), ref.Packing, true))
}
