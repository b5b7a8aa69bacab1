package main

import (
	"fmt"
	"math"
	"strings"
	"time"
)

// header names what the table was measured on (read at run time).
type header struct {
	GPU, UUID, Driver, CUDA string
	MemMiB                  uint64
	Versions                []string // "pytorch 2.11.0+cu130", "cupy 13.6.0", "nvcc 13.0"
	Date                    string
	Deadline, Timeout       time.Duration
	Secs                    float64
	CapMiB                  uint64
	Planned                 time.Duration
	Unconfined              bool // the share rows' controller ran with limiter.confineSlots: false
}

func (h header) render() string {
	var b strings.Builder
	fmt.Fprintf(&b, "# vgpu-gpu-check on %s (%s, %d MiB), driver %s, CUDA %s\n", h.GPU, h.UUID, h.MemMiB, h.Driver, h.CUDA)
	fmt.Fprintf(&b, "# programs: %s\n", strings.Join(h.Versions, ", "))
	fmt.Fprintf(&b, "# %s; deadline %s, row timeout %s, share rows %g s (measured over the second half, %% of the workload's solo rate), memory cap %d MiB; rows planned at %s\n",
		h.Date, h.Deadline, h.Timeout, h.Secs, h.CapMiB, h.Planned)
	slots := "confining launch slots (limiter.confineSlots: true, the default)"
	if h.Unconfined {
		slots = "launch slots that do not confine (limiter.confineSlots: false, -unconfined)"
	}
	fmt.Fprintf(&b, "# share rows' controller: %s\n", slots)
	fmt.Fprintf(&b, lineFormat, "group", "row", "target", "achieved", "verdict", "took", "note")
	return b.String()
}

const lineFormat = "%-8s %-32s %-10s %-16s %-13s %6s  %s\n"

func (o outcome) render() string {
	took := "-"
	if o.Status != statusSkipped {
		took = fmt.Sprintf("%.1fs", o.Took.Seconds())
	}
	return strings.TrimRight(fmt.Sprintf(lineFormat, o.Group, o.Name, o.Target, o.Achieved, o.Status, took, oneLine(o.Note)), " \n") + "\n"
}

// maxNote: a share row's note (GPU time two ways, device readings, per-pid
// samples, sample lateness, fitted periods, tenants' run) takes up to about
// 450 characters, all of it wanted from a GPU run.
const maxNote = 640

// oneLine keeps a note on one line, a runaway one cut at maxNote.
func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > maxNote {
		s = s[:maxNote-3] + "..."
	}
	return s
}

// footer sums the run up: the limiter.contextMiB line for this model, the
// single tenant's mean absolute error, the count per verdict.
func footer(outs []outcome, model string, took time.Duration) string {
	var b strings.Builder
	var ctxMiB uint64
	var single, gpuTime []float64
	var held, of int
	count := map[status]int{}
	for _, o := range outs {
		count[o.Status]++
		if o.Status == statusOK || o.Status == statusMiss {
			h, n := gpuTimeHeld(o)
			held, of = held+h, of+n
		}
		if o.Kind == kindContext && o.Status == statusOK {
			ctxMiB = max(ctxMiB, o.ContextMiB)
		}
		if o.Group == "single" && o.Kind == kindShare && (o.Status == statusOK || o.Status == statusMiss) {
			single = append(single, o.AbsErr...)
			if len(o.Tenants) == 1 && len(o.GPUTime) == 1 {
				gpuTime = append(gpuTime, math.Abs(o.GPUTime[0]-float64(o.Tenants[0].Cores)))
			}
		}
	}
	if ctxMiB > 0 {
		fmt.Fprintf(&b, "# device plugin setting for this model (largest context measured): limiter.contextMiB: {%q: %d}\n", model, ctxMiB)
	}
	if len(single) > 0 {
		fmt.Fprintf(&b, "# one tenant: mean absolute error %.2f points over %d rows (goal <= 2)", mean(single), len(single))
		if len(gpuTime) > 0 {
			// what the limiter holds; the rate also moves with the clock
			fmt.Fprintf(&b, "; in GPU time (the device's busy figure) %.2f over %d", mean(gpuTime), len(gpuTime))
		}
		b.WriteString("\n")
	}
	if of > 0 {
		fmt.Fprintf(&b, "# one program's share rows in GPU time (the device's busy time split by their rates): %d of %d tenants within their band\n", held, of)
	}
	var parts []string
	for _, s := range []status{statusOK, statusMiss, statusOver, statusEarly, statusError, statusTimeout, statusSkipped} {
		if count[s] > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", count[s], s))
		}
	}
	fmt.Fprintf(&b, "# %d rows: %s; took %.1fs\n", len(outs), strings.Join(parts, ", "), took.Seconds())
	return b.String()
}

func mean(v []float64) float64 {
	sum := 0.0
	for _, e := range v {
		sum += e
	}
	return sum / float64(len(v))
}
