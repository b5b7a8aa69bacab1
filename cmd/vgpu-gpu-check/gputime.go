package main

import (
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/compute"
)

// A share row's verdict reads each tenant's rate against its solo rate.
// On a power-capped card that is not what the limiter holds: a GEMM held to
// half the GPU's time runs at a higher clock than alone and does more than
// half its solo work (an H200: 60.7 for 50, 2026-11-29). Each share row's
// note therefore also gives its tenants' GPU time, measured two ways:
//   - where every tenant runs one program, the device's busy time split by
//     their rates (at one clock an iteration of one program costs every
//     tenant the same GPU time; a context switch's time lands on both, in
//     proportion): independent of the controller;
//   - for every row of tenants held to targets, the controller's own
//     attribution (compute.Decision Measured) over the same second half:
//     what it held them to, right only as far as its costs are.
//
// The device's busy figure is the controller's, over every period of the
// second half; a lone tenant's GPU time too (the footer's one-tenant error
// in GPU time).

// attribution sums the controller's attributed share of each tenant over
// the periods that end within the second half of the tenants' timed loops
// (their rates are measured over it; the periods after it hold a tenant that
// has ended). Observe calls add from the controller's goroutine, the start
// line arms it from another.
type attribution struct {
	mu       sync.Mutex
	from, to time.Time // from zero: not armed
	sum      map[string]float64
	busy     float64 // the device's busy time over them, ns
	total    float64 // ns of periods summed
}

// arm counts the periods that end from from to to.
func (a *attribution) arm(from, to time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.from, a.to = from, to
}

// add counts one period read at now (it ended o.Lag before).
func (a *attribution) add(o compute.Observation, now time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	end := now.Add(-o.Lag)
	if a.from.IsZero() || end.Before(a.from) || end.After(a.to) || o.Period <= 0 {
		return
	}
	if a.sum == nil {
		a.sum = map[string]float64{}
	}
	w := float64(o.Period)
	for _, d := range o.Decisions {
		a.sum[d.Key] += d.Measured * w
	}
	a.busy += o.Busy * w
	a.total += w
}

// busyMean is the device's busy percent over the periods counted, as the
// controller read it: every period of the second half, where the check's
// own readings (devSampler) take one 1/6 s sample every half second.
func (a *attribution) busyMean() (float64, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.total <= 0 {
		return 0, false
	}
	return 100 * a.busy / a.total, true
}

// shares are the tenants' (keys) attributed GPU time, percent of the
// periods counted; ok is false where none was.
func (a *attribution) shares(keys []string) ([]float64, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.total <= 0 {
		return nil, false
	}
	out := make([]float64, len(keys))
	for i, k := range keys {
		out[i] = 100 * a.sum[k] / a.total
	}
	return out, true
}

// note says what the controller attributed to keys: "" where nothing was
// counted or fewer than two are named (a lone tenant's is the device's
// figure; host.shares names none in a row of unlimited tenants, whose costs
// the controller pools, never fits: 11.7 + 88.3 attributed to PyTorch and
// the probe that ran 81 + 14 of their solo rates, fake driver).
func (a *attribution) note(keys []string) string {
	s, ok := a.shares(keys)
	if !ok || len(keys) < 2 {
		return ""
	}
	return "GPU time as the controller attributed it " + joinShares(s)
}

// splitByRate is each tenant's GPU time where every one of them runs the
// same workload: the device's busy percent split by their rates (got, % of
// the solo rate). ok is false for a mix of workloads, a single tenant or
// no rate.
func splitByRate(ts []tenantSpec, got []float64, busy float64) ([]float64, bool) {
	if len(ts) < 2 || len(got) != len(ts) {
		return nil, false
	}
	var sum float64
	for i, t := range ts {
		if t.Work != ts[0].Work {
			return nil, false
		}
		sum += got[i]
	}
	if sum <= 0 {
		return nil, false
	}
	out := make([]float64, len(got))
	for i, g := range got {
		out[i] = busy * g / sum
	}
	return out, true
}

// rowGPUTime is a share row's result.GPUTime: the device's busy percent over
// the second half (the controller's periods, else the check's own readings),
// split by rate where one program runs (split true), else that figure alone.
// The check's own readings are a 1/6 s sample every half second: a loop
// swinging in and out of saturation about once a second reads by their
// phase (on the fake driver as an H200 a pair at 30.9 + 62.4 of its solo
// rates, the clock 1.1 times the solo row's, read 84% busy).
func rowGPUTime(ts []tenantSpec, got []float64, attr *attribution, dev *devSampler) (gpuTime []float64, split bool) {
	busy, ok := attr.busyMean()
	if !ok {
		if busy, ok = dev.busyMean(); !ok {
			return nil, false
		}
	}
	if s, ok := splitByRate(ts, got, busy); ok {
		return s, true
	}
	return []float64{busy}, false
}

// gpuTimeNote says splitByRate's figures.
func gpuTimeNote(split []float64) string {
	return "GPU time (the device's busy time split by their rates) " + joinShares(split)
}

func joinShares(s []float64) string {
	parts := make([]string, len(s))
	for i, v := range s {
		parts[i] = fmt.Sprintf("%.1f", v)
	}
	return strings.Join(parts, " + ")
}

// gpuTimeHeld counts the fixed and balance tenants of one program's share
// rows whose GPU time (result.GPUTime, one per tenant) is within the
// verdict's band: what the limiter holds, apart from what the clock does
// to their rates.
func gpuTimeHeld(o outcome) (held, of int) {
	if o.Kind != kindShare || len(o.Tenants) < 2 || len(o.GPUTime) != len(o.Tenants) {
		return 0, 0
	}
	for i, t := range o.Tenants {
		if t.Unlimited {
			continue
		}
		d := o.GPUTime[i] - float64(t.Cores)
		of++
		if d >= -tolerance && (t.Balance || d <= tolerance) {
			held++
		}
	}
	return held, of
}
