package compute

import (
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestSimSplitSweep (SIM_SWEEP=1): when the fit over the turns first splits
// a pair's costs, and how far each run lands from its targets, across
// sample lags and start offsets, on an H200's terms (one sample a round
// reading the whole device, 1/6 s device windows, power-capped clocks;
// 40 us switches, or SIM_SWEEP_SWITCH_US; SIM_SWEEP_NO_SLOTS: without
// launch slots). Mixes of different programs
// should split early; one program's pairs should not split at all (a false
// split moves the GPU between them). An experiment, not a check:
// docs/limiter-history.md quotes it.
func TestSimSplitSweep(t *testing.T) {
	if os.Getenv("SIM_SWEEP") == "" {
		t.Skip("SIM_SWEEP=1: an experiment, not a check")
	}
	cheap := simProgram{units: 1600, kernel: 200 * time.Microsecond, depth: 100} // 125 ns per unit
	dear := simProgram{units: 2000, kernel: 2 * time.Millisecond, depth: 10}     // 1000 ns per unit
	mixes := []struct {
		name     string
		a, b     simProgram
		ta, tb   int
		oneProg  bool
		boostOff bool
	}{
		{name: "cheap 30 + dear 60", a: cheap, b: dear, ta: 30, tb: 60},
		{name: "dear 30 + cheap 60", a: dear, b: cheap, ta: 30, tb: 60},
		{name: "cheap 50 + dear 50", a: cheap, b: dear, ta: 50, tb: 50},
		{name: "GEMM 30 + elem 60", a: simGEMM, b: simElem, ta: 30, tb: 60},
		{name: "one program 30 + 60", a: cheap, b: cheap, ta: 30, tb: 60, oneProg: true},
		{name: "one program 50 + 50", a: dear, b: dear, ta: 50, tb: 50, oneProg: true},
		{name: "one program 45 + 45", a: cheap, b: cheap, ta: 45, tb: 45, oneProg: true},
		{name: "one dear program 30 + 60", a: dear, b: dear, ta: 30, tb: 60, oneProg: true},
		{name: "one program 30 + 60, steady clock", a: cheap, b: cheap, ta: 30, tb: 60, oneProg: true, boostOff: true},
		{name: "one GEMM 45 + 45", a: simGEMM, b: simGEMM, ta: 45, tb: 45, oneProg: true},
	}
	lags := []time.Duration{5, 15, 50, 100, 150, 200}
	// the H100's switches (two unlimited tenants 49 + 49% of solo), or the
	// H200's (45.9 + 45.9): SIM_SWEEP_SWITCH_US
	switchCost := 40 * time.Microsecond
	if us, err := strconv.Atoi(os.Getenv("SIM_SWEEP_SWITCH_US")); err == nil {
		switchCost = time.Duration(us) * time.Microsecond
	}
	offsets := []time.Duration{0, 30, 70, 100, 130, 170}
	var summary strings.Builder
	for _, m := range mixes {
		var splits []float64
		never, miss, falseSplit := 0, 0, 0
		var worst, sumErr float64
		for _, lag := range lags {
			for _, off := range offsets {
				specs := []simTenant{simT("a", m.ta, m.a), simT("b", m.tb, m.b)}
				specs[1].start = off * time.Millisecond
				// SIM_SWEEP_NO_SLOTS: a limiter that ignores the node's slots
				specs[0].noSlots = os.Getenv("SIM_SWEEP_NO_SLOTS") != ""
				specs[1].noSlots = specs[0].noSlots
				specs = stretch(specs, 16.0/12)
				fitted := time.Duration(-1)
				boost := 0.2
				if m.boostOff {
					boost = 0
				}
				got, _ := simulate(t, specs, simOptions{wholeDevice: true, switchCost: switchCost,
					delay: lag * time.Millisecond, window: 166667 * time.Microsecond, boost: boost, fittedAt: &fitted})
				d := max(math.Abs(got["a"]-float64(m.ta)), math.Abs(got["b"]-float64(m.tb)))
				worst, sumErr = max(worst, d), sumErr+d
				if d > 3 {
					miss++
				}
				switch {
				case fitted < 0:
					never++
				case m.oneProg:
					falseSplit++
				default:
					splits = append(splits, fitted.Seconds())
				}
				t.Logf("%s lag %v off %v: %s fitted at %v", m.name, lag*time.Millisecond, off*time.Millisecond, simString(got), fitted)
			}
		}
		var mean, last float64
		for _, s := range splits {
			mean += s
			last = max(last, s)
		}
		if len(splits) > 0 {
			mean /= float64(len(splits))
		}
		fmt.Fprintf(&summary, "\n%-34s runs %d: misses %d (worst %.1f, mean %.2f); split mean %.2f s, last %.2f s; never %d; false splits %d",
			m.name, len(lags)*len(offsets), miss, worst, sumErr/float64(len(lags)*len(offsets)), mean, last, never, falseSplit)
	}
	t.Log(summary.String())
}
