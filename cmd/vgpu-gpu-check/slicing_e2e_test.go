package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// The slicing rows on the fake driver time-slicing as the fakes model the
// H200 (2 ms slices, 170 µs switches): the stand-in (testdata/fake/slicing,
// vcuda's workload with --stamps and --slot) records what the fake engine
// ran for it, and the rows must read back the model's slices and switches
// from those intervals, and slots that hand the GPU over once a slot period.
// What a GPU does is what the rows are for; this checks that they read it.
func TestFakeDriverSlicing(t *testing.T) {
	build, fake := fakeDriver(t), fakePrograms(t)
	// The slotted launches are this machine's processes: one descheduled
	// past its slot's start (a busy CI runner) runs into the other's slot,
	// both contexts have work, and the engine slices them (a 0.90-fill
	// slot read 2000 µs runs once, beside the other packages). A model
	// that is wrong misses twice; load rarely does.
	var misses []string
	for attempt := 1; attempt <= 2; attempt++ {
		trace := filepath.Join(t.TempDir(), "trace")
		out := runFakeCheck(t, build, []string{"-probe", "off", "-slicing", filepath.Join(fake, "slicing"),
			"-use", "pytorch", "-only", "slicing", "-deadline", "2m", "-scenario-timeout", "40s", "-work", t.TempDir(), "-trace", trace},
			"FAKEGPU_SLICE_US=2000", "FAKEGPU_SWITCH_US=170")
		t.Logf("fake driver (2 ms slices, 170 µs switches), slicing rows, attempt %d:\n%s", attempt, out)
		if misses = slicingMisses(out, trace); len(misses) == 0 {
			return
		}
		if attempt == 1 {
			t.Logf("attempt 1 missed, again:\n%s", strings.Join(misses, "\n"))
		}
	}
	t.Error("twice; the second time:\n" + strings.Join(misses, "\n"))
}

// slicingMisses is what the slicing rows in out, and the intervals kept in
// trace, miss of the fake's model.
func slicingMisses(out []byte, trace string) []string {
	var misses []string
	miss := func(format string, a ...any) { misses = append(misses, fmt.Sprintf(format, a...)) }
	// Loose bounds: this machine's load delays the slotted launches and the
	// engine's lazy timeline, not the model's slice and switch.
	for _, tc := range []struct {
		row              string
		together         [2]float64 // % of the GPU's time
		run, gap         [2]float64 // medians, µs
		overlapAtMostPct float64
	}{
		{row: `back to back x2`, together: [2]float64{88, 95}, run: [2]float64{1800, 2200}, gap: [2]float64{150, 190}},
		{row: `slots 20\+20 of 40 ms, fill 0\.90`, together: [2]float64{70, 95}, run: [2]float64{12000, 20500}, gap: [2]float64{0, 8000}, overlapAtMostPct: 1},
		// a slot's full queue, launched a little late, runs into the next
		// slot: from then on both contexts have work and the engine slices
		// them, as the fakes say the full GPU's rows lose their 8%
		{row: `slots 20\+20 of 40 ms, fill 1\.00`, together: [2]float64{88, 95}, run: [2]float64{1800, 5000}, gap: [2]float64{150, 400}},
	} {
		m := regexp.MustCompile(`(?m)^slicing +` + tc.row + ` +- +[0-9.]+\+[0-9.]+ +ok .*together ([0-9.]+)% of the GPU's time; runs (-?[0-9]+) µs .*hand-off gap (-?[0-9]+) µs .*overlapping ([0-9.]+)%`).FindSubmatch(out)
		if m == nil {
			miss("no measured row %q", tc.row)
			continue
		}
		f := func(i int) float64 { v, _ := strconv.ParseFloat(string(m[i]), 64); return v }
		if v := f(1); v < tc.together[0] || v > tc.together[1] {
			miss("%s: together %.1f%%, want %v", tc.row, v, tc.together)
		}
		if v := f(2); v < tc.run[0] || v > tc.run[1] {
			miss("%s: runs %.0f µs, want %v", tc.row, v, tc.run)
		}
		if v := f(3); v < tc.gap[0] || v > tc.gap[1] {
			miss("%s: hand-off gap %.0f µs, want %v", tc.row, v, tc.gap)
		}
		if v := f(4); v > tc.overlapAtMostPct {
			miss("%s: %.1f%% of the hand-offs overlap; the fake runs one context at a time", tc.row, v)
		}
	}
	for _, bad := range []string{"ERROR", "TIMEOUT", "skipped"} {
		if strings.Contains(string(out), bad) {
			miss("the table reads %s", bad)
		}
	}
	// each tenant's intervals kept beside the traces
	for _, f := range []string{"slicing-back-to-back-x2.t0.txt", "slicing-back-to-back-x2.t1.txt"} {
		if st, err := os.Stat(filepath.Join(trace, f)); err != nil || st.Size() == 0 {
			miss("intervals %s: %v", f, err)
		}
	}
	return misses
}
