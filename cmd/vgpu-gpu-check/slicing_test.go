package main

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

const us = uint64(1000) // ns

// kernels: back-to-back kernels of k ns from start to end.
func kernels(start, end, k uint64) []interval {
	var out []interval
	for t := start; t+k <= end; t += k {
		out = append(out, interval{t, t + k})
	}
	return out
}

// sliced: two tenants taking turns of slice ns with a switch of sw ns between
// turns, kernels of k ns, over total ns.
func sliced(slice, sw, k, total uint64) [][]interval {
	ts := make([][]interval, 2)
	i := 0
	for t := uint64(0); t+slice <= total; t += slice + sw {
		ts[i] = append(ts[i], kernels(t, t+slice, k)...)
		i = 1 - i
	}
	return ts
}

// slotted: each tenant fills fill of its half of every period of p ns.
func slotted(p uint64, fill float64, k, total uint64) [][]interval {
	ts := make([][]interval, 2)
	for t := uint64(0); t+p <= total; t += p {
		for i := range ts {
			at := t + uint64(i)*p/2
			ts[i] = append(ts[i], kernels(at, at+uint64(fill*float64(p/2)), k)...)
		}
	}
	return ts
}

// cutSlices: two tenants taking turns of slice ns with a switch of sw ns, as
// an H200 runs them (2026-11-29): a turn ends mid-kernel (compute
// preemption), and the kernel, recorded from its start to its end, resumes
// at the tenant's next turn. Kernels of k ns, the first cut after done ns.
func cutSlices(slice, sw, k, done, total uint64) [][]interval {
	ts := make([][]interval, 2)
	rest := []uint64{0, 0} // what each one's cut kernel has left
	open := []int{-1, -1}  // its index
	i := 0
	for t := uint64(0); t+slice <= total; t += slice + sw {
		at, end := t, t+slice
		if open[i] >= 0 {
			at += rest[i]
			ts[i][open[i]].end = at
			open[i] = -1
		}
		for at+k <= end {
			ts[i] = append(ts[i], interval{at, at + k})
			at += k
		}
		// cut mid-kernel: done of it now (or what the turn leaves), the rest later
		ran := min(done, end-at)
		ts[i] = append(ts[i], interval{at, 0})
		open[i], rest[i] = len(ts[i])-1, k-ran
		i = 1 - i
	}
	for i := range ts {
		if open[i] >= 0 {
			ts[i] = ts[i][:open[i]]
		}
	}
	return ts
}

func near(got, want, tol float64) bool { return math.Abs(got-want) <= tol }

func TestAnalyze(t *testing.T) {
	preempted := sliced(2000*us, 170*us, 100*us, 1000000*us)
	// the last kernel of every fifth turn of tenant 0 held on past the
	// switch and the other's turn (preempted mid-kernel, as compute
	// preemption shows): one hand-off in ten overlaps
	for i := 99; i < len(preempted[0]); i += 100 {
		preempted[0][i].end += 2400 * us
	}
	for _, tc := range []struct {
		name            string
		tenants         [][]interval
		share           []float64 // of the GPU's time, each
		run, gap, runsS float64   // medians (µs) and tenant 0's runs a second
		overlap         float64
		preempted       float64
		// within (µs, 0: a fiftieth of the run and 10 µs of the gap): a cut
		// kernel's two parts are placed to within a kernel's time (when in
		// it the cut came is not recorded)
		within float64
	}{
		{name: "time slices of 2 ms with 170 µs switches (the fakes' H200)", tenants: sliced(2000*us, 170*us, 100*us, 1000000*us),
			share: []float64{0.461, 0.461}, run: 2000, gap: 170, runsS: 230.4},
		{name: "slots filled to 90%: a drained queue before each hand-off", tenants: slotted(40000*us, 0.9, 100*us, 1000000*us),
			share: []float64{0.45, 0.45}, run: 18000, gap: 2000, runsS: 25},
		{name: "a kernel preempted across the other's turn: split, its time not counted twice", tenants: preempted,
			share: []float64{0.461, 0.461}, run: 2000, gap: 170, runsS: 230.4, preempted: 0.1},
		// the H200's: runs read 2261 µs, gaps -2258 µs, 100% overlapping,
		// together 100%, before preempted kernels were split
		{name: "every turn cut mid-kernel (an H200)", tenants: cutSlices(2100*us, 180*us, 94*us, 40*us, 1000000*us),
			share: []float64{0.460, 0.460}, run: 2100, gap: 180, runsS: 219, preempted: 1, within: 94},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, err := analyze(tc.tenants)
			if err != nil {
				t.Fatal(err)
			}
			for i, w := range tc.share {
				if !near(st.Share[i], w, 0.01) {
					t.Errorf("tenant %d share %.3f, want %.3f", i, st.Share[i], w)
				}
			}
			runTol, gapTol := tc.run/50, 10.0
			if tc.within > 0 {
				runTol, gapTol = tc.within, tc.within
			}
			if !near(st.Run.P50, tc.run, runTol) || !near(st.Gap.P50, tc.gap, gapTol) {
				t.Errorf("run %.0f µs, gap %.0f µs; want %.0f, %.0f", st.Run.P50, st.Gap.P50, tc.run, tc.gap)
			}
			if !near(st.RunsPerS[0], tc.runsS, tc.runsS/20) {
				t.Errorf("tenant 0: %.1f runs a second, want %.1f", st.RunsPerS[0], tc.runsS)
			}
			if !near(st.Overlap, tc.overlap, 0.02) || !near(st.Preempted, tc.preempted, 0.02) {
				t.Errorf("overlap %.3f, preempted %.3f; want %.3f, %.3f", st.Overlap, st.Preempted, tc.overlap, tc.preempted)
			}
			if s := st.summary(); !strings.Contains(s, "of the GPU's time") {
				t.Errorf("summary %q", s)
			}
		})
	}
}

func TestAnalyzeErrors(t *testing.T) {
	for _, tc := range []struct {
		name    string
		tenants [][]interval
		want    string
	}{
		{name: "a tenant that recorded nothing", tenants: [][]interval{kernels(0, 1000*us, 100*us), nil}, want: "tenant 1 recorded no kernel"},
		{name: "tenants on clocks that never meet", tenants: [][]interval{kernels(0, 1000*us, 100*us), kernels(5000*us, 6000*us, 100*us)},
			want: "no span where all ran"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := analyze(tc.tenants)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

func TestReadIntervals(t *testing.T) {
	for _, tc := range []struct {
		name, text string
		want       int
		err        string
	}{
		{name: "kernels that never ran (start past end) are left out", text: "100 200\n\n300 450\n18446744073709551615 0\n", want: 2},
		{name: "a line of one field", text: "100 200\n300\n", err: "line 2: want START_NS END_NS"},
		{name: "not numbers", text: "a b\n", err: "line 1: want two decimal ns"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "t0.txt")
			if err := os.WriteFile(p, []byte(tc.text), 0o644); err != nil {
				t.Fatal(err)
			}
			got, err := readIntervals(p)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Errorf("error %v, want one containing %q", err, tc.err)
				}
				return
			}
			if err != nil || len(got) != tc.want {
				t.Errorf("got %d intervals (%v), want %d", len(got), err, tc.want)
			}
		})
	}
}

func TestTimerNote(t *testing.T) {
	step := func(v uint64) slicingOut { return slicingOut{TimerNs: &v} }
	for _, tc := range []struct {
		name     string
		outs     []slicingOut
		want     string
		readable bool
	}{
		{"not reported (the fake driver's stand-in)", []slicingOut{{}, {}}, "", true},
		{"nanosecond steps", []slicingOut{step(32), step(32)}, "global timer steps 32 ns", true},
		{"the coarser tenant counts", []slicingOut{step(32), step(1000)}, "global timer steps 1000 ns", true},
		{"a millisecond timer", []slicingOut{step(1000), step(1000000)}, "global timer steps 1000 µs: too coarse to read runs and gaps", false},
		{"a timer that never moved", []slicingOut{step(32), step(0)}, "the GPU's global timer did not move: runs and gaps are not readable", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, readable := timerNote(tc.outs)
			if got != tc.want || readable != tc.readable {
				t.Errorf("timerNote = %q, %v; want %q, %v", got, readable, tc.want, tc.readable)
			}
		})
	}
}

func TestPriorityNote(t *testing.T) {
	yes, no := true, false
	for _, tc := range []struct {
		name string
		outs []slicingOut
		want string
	}{
		{"back to back: no slot, nothing to say", []slicingOut{{}, {}}, ""},
		{"both real-time", []slicingOut{{RT: &yes}, {RT: &yes}}, ""},
		{"one at normal priority", []slicingOut{{RT: &yes}, {RT: &no}}, "slot launches at normal priority (SCHED_FIFO refused): one woken late slices the pair"},
		{"refused with its reason", []slicingOut{{RT: &no, RTErr: int(syscall.EPERM)}, {RT: &yes}}, "slot launches at normal priority (SCHED_FIFO refused: operation not permitted): one woken late slices the pair"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := priorityNote(tc.outs); got != tc.want {
				t.Errorf("priorityNote = %q, want %q", got, tc.want)
			}
		})
	}
}
