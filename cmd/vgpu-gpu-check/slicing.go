package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The slicing rows measure how the GPU itself shares its time between
// processes, with no limiter: two tenants of the slicing program (slicing.cu)
// record where each of their kernels ran on the GPU's global timer. Without a
// slot both launch back to back, and the GPU time-slices them: how long a
// context runs before the other (its time slice) and how long a hand-off
// leaves the GPU idle (the switch) are what the fake driver's
// FAKEGPU_SLICE_US and FAKEGPU_SWITCH_US and the simulation stand in for
// (guessed so far: 2 ms and 170 µs, from the H200's 8% loss with two
// unlimited matmul loops). With slots each launches only at its slot's
// start, as libvcuda's launch slots do: whether a queue filled to its slot
// drains before the other's begins, and what the hand-off then costs, is
// what the full GPU's rows (50 + 50, balance) miss by on a time-sliced card.

// interval is where one kernel (or, on the fake driver, one run of a
// process) ran, in ns of the GPU's clock.
type interval struct{ start, end uint64 }

// readIntervals reads a slicing program's OUT file: "START_NS END_NS" a line.
// A kernel that never ran (start past end) is left out.
func readIntervals(path string) ([]interval, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []interval
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 {
			continue
		}
		if len(fields) != 2 {
			return nil, fmt.Errorf("%s line %d: want START_NS END_NS, got %q", path, n, sc.Text())
		}
		a, err1 := strconv.ParseUint(fields[0], 10, 64)
		b, err2 := strconv.ParseUint(fields[1], 10, 64)
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("%s line %d: want two decimal ns, got %q", path, n, sc.Text())
		}
		if b > a {
			out = append(out, interval{a, b})
		}
	}
	return out, sc.Err()
}

// gpuRun is a stretch of the GPU's time one tenant held: its kernels in a row,
// no other tenant's starting in between.
type gpuRun struct {
	tenant     int
	start, end uint64
}

// sliceStats is what a slicing row measured over its window.
type sliceStats struct {
	Window   time.Duration
	Share    []float64 // per tenant: the GPU time its runs held, of the window
	RunsPerS []float64 // per tenant: runs a second
	Run      quantiles // run lengths, µs (the runs that both began and ended in the window)
	Gap      quantiles // hand-off gaps, µs: the next run's start less the last run's end
	Overlap  float64   // of the hand-offs, those whose next run began before the last one's end (two contexts' kernels at once)
	// Preempted: of the hand-offs, those that cut a kernel mid-way (its
	// interval spans the other's run: an H200 preempted one at every slice's
	// end, 2026-11-29); such a kernel is split into what it ran before and
	// after (analyze)
	Preempted float64
}

type quantiles struct{ P10, P50, P90 float64 }

// quantilesOf: the 10th, 50th and 90th percentile of v (zero when empty).
func quantilesOf(v []float64) quantiles {
	if len(v) == 0 {
		return quantiles{}
	}
	s := slices.Clone(v)
	slices.Sort(s)
	at := func(p float64) float64 { return s[int(p*float64(len(s)-1)+0.5)] }
	return quantiles{at(0.1), at(0.5), at(0.9)}
}

// analyze merges the tenants' intervals into runs and measures them over the
// second half of the span where every tenant ran (the rows' other
// measurements take the second half too).
func analyze(tenants [][]interval) (sliceStats, error) {
	var lo, hi uint64
	hi = ^uint64(0)
	type tagged struct {
		interval
		tenant int
	}
	var all []tagged
	for i, iv := range tenants {
		if len(iv) == 0 {
			return sliceStats{}, fmt.Errorf("tenant %d recorded no kernel", i)
		}
		first, last := iv[0].start, iv[0].end
		for _, k := range iv {
			first, last = min(first, k.start), max(last, k.end)
			all = append(all, tagged{k, i})
		}
		lo, hi = max(lo, first), min(hi, last)
	}
	if hi <= lo {
		return sliceStats{}, fmt.Errorf("the tenants ran at different times (no span where all ran): a clock not shared by the processes?")
	}
	lo += (hi - lo) / 2
	sort.Slice(all, func(a, b int) bool { return all[a].start < all[b].start })
	alone := make([]uint64, len(tenants))
	for i, iv := range tenants {
		alone[i] = medianKernel(iv)
	}
	// A kernel during which another tenant's kernels began was preempted at
	// a slice's end and resumed after the other's run: it ran its first
	// part up to the other's first start (at most a kernel's time alone)
	// and the rest at its end.
	preempted := 0
	var split []tagged
	for i, k := range all {
		first := uint64(0)
		for j := i + 1; j < len(all) && all[j].start < k.end; j++ {
			if all[j].tenant != k.tenant {
				first = all[j].start
				break
			}
		}
		d := alone[k.tenant]
		if first == 0 || k.end-k.start <= d+d/2 {
			split = append(split, k)
			continue
		}
		if k.end > lo && k.start < hi {
			preempted++
		}
		a := min(first, k.start+d)
		b := max(k.end-(d-min(d, a-k.start)), a)
		split = append(split, tagged{interval{k.start, a}, k.tenant}, tagged{interval{b, k.end}, k.tenant})
	}
	all = split
	sort.Slice(all, func(a, b int) bool { return all[a].start < all[b].start })
	var runs []gpuRun
	for _, k := range all {
		if k.end <= lo || k.start >= hi {
			continue
		}
		if n := len(runs); n > 0 && runs[n-1].tenant == k.tenant {
			runs[n-1].end = max(runs[n-1].end, k.end)
			continue
		}
		runs = append(runs, gpuRun{k.tenant, k.start, k.end})
	}
	st := sliceStats{Window: time.Duration(hi - lo), Share: make([]float64, len(tenants)), RunsPerS: make([]float64, len(tenants))}
	var lens, gaps []float64
	overlaps := 0
	for i, r := range runs {
		held := min(r.end, hi) - max(r.start, lo)
		if i+1 < len(runs) {
			next := runs[i+1].start
			if next < r.end {
				overlaps++
				held = max(next, lo) - max(r.start, lo)
				gaps = append(gaps, -float64(r.end-next)/1e3)
			} else {
				gaps = append(gaps, float64(next-r.end)/1e3)
			}
			if i > 0 && r.start >= lo {
				lens = append(lens, float64(min(r.end, next)-r.start)/1e3)
			}
		}
		st.Share[r.tenant] += float64(held) / float64(hi-lo)
		st.RunsPerS[r.tenant] += 1e9 / float64(hi-lo)
	}
	st.Run, st.Gap = quantilesOf(lens), quantilesOf(gaps)
	if len(gaps) > 0 {
		st.Overlap = float64(overlaps) / float64(len(gaps))
		st.Preempted = min(float64(preempted)/float64(len(gaps)), 1)
	}
	return st, nil
}

// medianKernel is the median length of a tenant's kernels: its kernel's time
// alone, most of them not preempted.
func medianKernel(iv []interval) uint64 {
	d := make([]uint64, len(iv))
	for i, k := range iv {
		d[i] = k.end - k.start
	}
	slices.Sort(d)
	return d[len(d)/2]
}

// summary is the row's note: runs, hand-offs, what the tenants held together.
func (s sliceStats) summary() string {
	var together float64
	for _, v := range s.Share {
		together += v
	}
	runs := make([]string, len(s.RunsPerS))
	for i, v := range s.RunsPerS {
		runs[i] = fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("together %.1f%% of the GPU's time; runs %.0f µs (p10 %.0f, p90 %.0f), %s a second; hand-off gap %.0f µs (p10 %.0f, p90 %.0f), overlapping %.1f%%, a kernel preempted at %.0f%%; over %s",
		100*together, s.Run.P50, s.Run.P10, s.Run.P90, strings.Join(runs, "+"), s.Gap.P50, s.Gap.P10, s.Gap.P90, 100*s.Overlap, 100*s.Preempted,
		s.Window.Round(time.Millisecond))
}

// slot is a slicing tenant's launch slot (slicing.cu's PERIOD_US START_US
// LEN_US FILL); nil: back to back.
type slot struct {
	PeriodUs, StartUs, LenUs int
	Fill                     float64
}

// slicingSecs: how long a slicing tenant launches; its second half spans
// hundreds of time slices and 37 slot periods.
const slicingSecs = 3.0

// slicingOut is a slicing tenant's JSON line.
type slicingOut struct {
	Kernels  int64   `json:"kernels"`
	KernelNs float64 `json:"kernel_ns"`
	Rate     float64 `json:"rate"`
	TimerNs  *uint64 `json:"timer_ns"` // the global timer's smallest step seen (0: it did not move); nil: not reported
	RT       *bool   `json:"rt"`       // a slotted tenant launched at real-time priority; nil: no slot
	RTErr    int     `json:"rt_err"`   // why real-time priority was refused (errno; 0: not said)
}

// priorityNote is the caveat of a slotted row whose launches did not run at
// real-time priority: the host's scheduler may wake one late into the
// other's slot, which the row then reads as the GPU slicing them.
func priorityNote(outs []slicingOut) string {
	for _, o := range outs {
		if o.RT != nil && !*o.RT {
			why := "refused"
			if o.RTErr != 0 {
				why += ": " + syscall.Errno(o.RTErr).Error()
			}
			return "slot launches at normal priority (SCHED_FIFO " + why + "): one woken late slices the pair"
		}
	}
	return ""
}

// coarseTimerNs: a global timer stepping more coarsely than this cannot place
// the fakes' hand-off gaps (170 µs modelled) or a 100 µs kernel.
const coarseTimerNs = 20000

// timerNote says how finely the tenants' stamps place a kernel ("" when the
// program did not report it, as the fake driver's stand-in does not), and
// whether that is fine enough to read runs and gaps.
func timerNote(outs []slicingOut) (string, bool) {
	var step uint64
	reported, still := false, false
	for _, o := range outs {
		if o.TimerNs != nil {
			reported, still = true, still || *o.TimerNs == 0
			step = max(step, *o.TimerNs)
		}
	}
	switch {
	case !reported:
		return "", true
	case still:
		return "the GPU's global timer did not move: runs and gaps are not readable", false
	case step > coarseTimerNs:
		return fmt.Sprintf("global timer steps %.0f µs: too coarse to read runs and gaps", float64(step)/1e3), false
	default:
		return fmt.Sprintf("global timer steps %d ns", step), true
	}
}

// runSlicing runs a slicing row: its tenants together from one start line,
// then their intervals merged (analyze). Each tenant's intervals are kept
// beside the row's trace (-trace) for reading afterwards.
func (c *check) runSlicing(ctx context.Context, r row) (result, error) {
	if c.slicing.missing != "" {
		return result{}, fmt.Errorf("the slicing program: %s: %w", c.slicing.missing, errUnavailable)
	}
	line, err := newStartLine(c.h.work, len(r.Slots))
	if err != nil {
		return result{}, err
	}
	defer line.remove()
	n := len(r.Slots)
	files, outs := make([]string, n), make([]slicingOut, n)
	errs := line.together(ctx, n, func(i int) error {
		files[i] = filepath.Join(line.dir, fmt.Sprintf("t%d.txt", i))
		args := append(slices.Clone(c.slicing.cmd[1:]), fmt.Sprint(slicingSecs), files[i])
		if s := r.Slots[i]; s != nil {
			args = append(args, fmt.Sprint(s.PeriodUs), fmt.Sprint(s.StartUs), fmt.Sprint(s.LenUs), fmt.Sprint(s.Fill))
		}
		return runJSONEnv(ctx, c.o.timeout, line.env(i), &outs[i], c.slicing.cmd[0], args...)
	})
	if err := errors.Join(errs...); err != nil {
		return result{}, err
	}
	tenants := make([][]interval, n)
	for i, f := range files {
		if tenants[i], err = readIntervals(f); err != nil {
			return result{}, err
		}
		if c.o.trace != "" {
			if err := keepIntervals(c.o.trace, r, i, f); err != nil {
				return result{}, err
			}
		}
	}
	st, err := analyze(tenants)
	if err != nil {
		return result{}, err
	}
	ach := make([]string, n)
	kernels := make([]string, n)
	for i, v := range st.Share {
		ach[i] = fmt.Sprintf("%.1f", 100*v)
		kernels[i] = fmt.Sprintf("%.0f", outs[i].KernelNs/1e3)
	}
	note := st.summary() + "; kernels " + strings.Join(kernels, "/") + " µs alone"
	tn, readable := timerNote(outs)
	for _, n := range []string{tn, priorityNote(outs)} {
		if n != "" {
			note += "; " + n
		}
	}
	if ln := line.note(); ln != "" {
		note += "; " + ln
	}
	res := result{Target: "-", Achieved: strings.Join(ach, "+"), Status: statusOK, Note: note}
	if !readable {
		res.Status = statusError
	}
	return res, nil
}

// keepIntervals copies tenant i's intervals beside the row's trace.
func keepIntervals(dir string, r row, i int, from string) error {
	b, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("trace directory: %w", err)
	}
	name := strings.TrimSuffix(traceFile(r), ".tsv") + fmt.Sprintf(".t%d.txt", i)
	return os.WriteFile(filepath.Join(dir, name), b, 0o644)
}
