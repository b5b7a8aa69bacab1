package main

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

type rowKind int

const (
	kindContext   rowKind = iota // a program's CUDA context, no limiter
	kindMemory                   // the memory cap on one allocation path
	kindSolo                     // a workload alone, no compute limit: the 100% of the share rows
	kindShare                    // tenants together under the node's compute controller
	kindMPS                      // tenants together as clients of one MPS server (mpsrows.go)
	kindMPSMemory                // the memory cap of an MPS client on one allocation path
	kindSlicing                  // the GPU's own time slicing, no limiter (slicing.go)
	kindGuard                    // the node's memory guard against a tenant past its cap (guard.go)
)

// tenantSpec is one tenant of a share row.
type tenantSpec struct {
	Work    string // workload: pytorch, cupy, probe (long kernels), probe-elem (short elementwise kernels), pytorch-deep (matmuls never synchronized)
	Cores   int    // percent of the GPU
	Balance bool   // policy balance (lends idle capacity) instead of fixed
	// Unlimited: no compute limit (Cores 0), as the solo rows run. Rows of
	// unlimited tenants measure what the GPU itself gives tenants that run
	// at once: on a time-sliced GPU a full one loses time to switching
	// contexts (two unlimited matmul loops got 45.9 + 45.9% of their solo
	// rate on an H200), which no limiter gives back, so rows whose targets
	// fill the GPU are read beside them.
	Unlimited bool
}

// row is one line of the table, planned before anything runs.
type row struct {
	Group   string
	Name    string
	Kind    rowKind
	Program string       // context, memory
	Path    string       // memory: the allocation path
	Work    string       // solo
	Tenants []tenantSpec // share
	// Secs: how long a share row's tenants run (0: -seconds). The mixed
	// rows run longer: on a GPU whose per-process samples give no shares
	// the controller fits different programs' costs over turns of 2 s,
	// which a 10 s row measured over its second half caught half-way (a
	// GEMM 30 beside an elementwise 60: 28.8 + 64.7 in 10 s, 30.4 + 61.6
	// in 16 s, simulated).
	Secs   float64
	Budget time.Duration
	Skip   string  // set when the flags leave this row out of reach
	Slots  []*slot // slicing: a tenant each, its launch slot (nil: back to back)
}

// programOf is the program that runs a workload.
func programOf(work string) string {
	switch work {
	case "probe-elem":
		return "probe"
	case "pytorch-deep":
		return "pytorch"
	}
	return work
}

// memPaths are the allocation paths each program's mem mode covers.
func memPaths(program string) []string {
	switch program {
	case "pytorch":
		return []string{"default", "expandable", "async"}
	case "cupy":
		return []string{"default"}
	case "probe":
		return []string{"malloc", "cumemalloc", "managed", "async", "pitch", "vmm"}
	}
	return nil
}

// budgets is the planned time of a program's context row and of each of its
// memory rows on an H100, process start included (importing PyTorch and
// opening a context take 3-5 s, CuPy 2-3 s, the probe < 1 s: its rows took
// 0.3-1.3 s on the H200).
func budgets(program string) (context, memory time.Duration) {
	switch program {
	case "pytorch":
		return 8 * time.Second, 10 * time.Second
	case "cupy":
		return 6 * time.Second, 8 * time.Second
	}
	return 2 * time.Second, 2 * time.Second
}

// slicingBudget: a slicing row's tenants launch slicingSecs after setting
// up (a context and two calibration runs: under a second).
const slicingBudget = 5 * time.Second

// mixedFactor: of -seconds, how long the mixed rows' tenants run (row.Secs).
const mixedFactor = 1.6

// unlimitedFactor: of -seconds, how long unlimited tenants run: no
// controller has to settle, and their second half still spans many of the
// GPU's time slices and utilization samples.
const unlimitedFactor = 0.6

// shareBudget: the tenants run secs; each start adds about a second beside
// the first one's 4 s.
func shareBudget(secs float64, tenants int) time.Duration {
	return time.Duration(secs*float64(time.Second)) + 4*time.Second + time.Duration(tenants)*time.Second
}

// plan lists the rows the options ask for, in run order. The share rows of a
// workload follow its solo row (their 100%).
func plan(o options) []row {
	var rows []row
	used := func(work string) string {
		if !slices.Contains(o.use, programOf(work)) {
			return programOf(work) + " is not in -use"
		}
		return ""
	}
	soloDone := map[string]bool{}
	solo := func(group, work string) {
		if soloDone[work] {
			return
		}
		soloDone[work] = true
		rows = append(rows, row{Group: group, Name: "solo " + work, Kind: kindSolo, Work: work,
			Budget: shareBudget(o.secs, 1), Skip: used(work)})
	}
	share := func(group string, ts ...tenantSpec) *row {
		for _, t := range ts {
			solo(group, t.Work)
		}
		skip := ""
		for _, t := range ts {
			if s := used(t.Work); s != "" {
				skip = s
				break
			}
		}
		rows = append(rows, row{Group: group, Name: shareName(ts), Kind: kindShare, Tenants: ts,
			Budget: shareBudget(o.secs, len(ts)), Skip: skip})
		return &rows[len(rows)-1]
	}
	runFor := func(r *row, factor float64) {
		r.Secs = factor * o.secs
		r.Budget = shareBudget(r.Secs, len(r.Tenants))
	}
	longer := func(r *row) { runFor(r, mixedFactor) }
	unlimited := func(group string, works ...string) {
		ts := make([]tenantSpec, len(works))
		for i, w := range works {
			ts[i] = tenantSpec{Work: w, Unlimited: true}
		}
		runFor(share(group, ts...), unlimitedFactor)
	}
	mpsShare := func(group string, ts ...tenantSpec) {
		share(group, ts...)
		last := &rows[len(rows)-1]
		last.Name, last.Kind, last.Budget = "mps "+last.Name, kindMPS, last.Budget+mpsStart
	}
	fixed := func(work string, cores ...int) []tenantSpec {
		ts := make([]tenantSpec, len(cores))
		for i, c := range cores {
			ts[i] = tenantSpec{Work: work, Cores: c}
		}
		return ts
	}
	w := o.share
	for _, g := range o.groups {
		switch g {
		case "context":
			for _, p := range o.use {
				ctxBudget, _ := budgets(p)
				rows = append(rows, row{Group: g, Name: "context " + p, Kind: kindContext, Program: p, Budget: ctxBudget})
			}
		case "memory":
			for _, p := range o.use {
				_, memBudget := budgets(p)
				for _, path := range memPaths(p) {
					rows = append(rows, row{Group: g, Name: p + "/" + path, Kind: kindMemory, Program: p, Path: path, Budget: memBudget})
				}
			}
		case "guard":
			skip := ""
			if !slices.Contains(o.use, "probe") {
				skip = "probe is not in -use (the guard row runs the probe)"
			}
			rows = append(rows, row{Group: g, Name: "memory guard, probe/malloc", Kind: kindGuard, Program: "probe", Path: "malloc",
				Budget: guardBudget, Skip: skip})
		case "single":
			for _, c := range []int{10, 30, 50, 70, 90} {
				share(g, fixed(w, c)...)
			}
		case "pair":
			share(g, fixed(w, 30, 60)...)
			share(g, fixed(w, 50, 50)...)
			unlimited(g, w, w)
		case "slicing":
			// two tenants back to back, then in slots of 20 ms each of 40 (as
			// libvcuda's on an H200) filled to 90, 95 and 100% of their length:
			// on the fakes a full slot's queue runs into the next slot and the
			// two time-slice from then on (the full GPU's rows' loss), one
			// filled to 90% hands the GPU over once a slot
			rows = append(rows, row{Group: g, Name: "back to back x2", Kind: kindSlicing,
				Slots: []*slot{nil, nil}, Budget: slicingBudget})
			for _, fill := range []float64{0.9, 0.95, 1} {
				rows = append(rows, row{Group: g, Name: fmt.Sprintf("slots 20+20 of 40 ms, fill %.2f", fill), Kind: kindSlicing,
					Slots: []*slot{{40000, 0, 20000, fill}, {40000, 20000, 20000, fill}}, Budget: slicingBudget})
			}
		case "mixed":
			longer(share(g, tenantSpec{Work: "pytorch", Cores: 30}, tenantSpec{Work: "probe-elem", Cores: 60}))
			longer(share(g, tenantSpec{Work: "pytorch", Cores: 50}, tenantSpec{Work: "probe-elem", Cores: 50}))
			unlimited(g, "pytorch", "probe-elem")
		case "triple":
			share(g, fixed(w, 20, 30, 40)...)
		case "balance":
			share(g, tenantSpec{Work: w, Cores: 50}, tenantSpec{Work: w, Cores: 30, Balance: true})
		case "mps":
			// the memory cap through an MPS client, then the shares
			p := programOf(w)
			_, memBudget := budgets(p)
			rows = append(rows, row{Group: g, Name: "mps " + p + "/" + memPaths(p)[0], Kind: kindMPSMemory, Program: p,
				Path: memPaths(p)[0], Budget: memBudget + mpsStart, Skip: used(w)})
			mpsShare(g, fixed(w, 30, 60)...)
			mpsShare(g, fixed(w, 50, 50)...)
			mpsShare(g, tenantSpec{Work: "pytorch", Cores: 30}, tenantSpec{Work: "probe-elem", Cores: 60})
		case "deep":
			// PyTorch's matmuls never synchronized (a training loop that reads
			// no loss back): the launches block only on CUDA's full queue. On
			// the simulated H200 such a pair of one program was split 38 times
			// apart before the fit asked for a third phase (32.3 + 61.7 for
			// 50 + 50, 70.7 + 21.3 for 45 + 50 with 0.5 s queued)
			share(g, fixed("pytorch-deep", 50, 50)...)
			share(g, fixed("pytorch-deep", 45, 50)...)
			// and beside the probe: the simulated H200 puts such a PyTorch
			// over its share once 128 or more matmuls queue (the probe 46.3
			// for 50), its fitted cost under what its kernels cost
			longer(share(g, tenantSpec{Work: "pytorch-deep", Cores: 50}, tenantSpec{Work: "probe-elem", Cores: 50}))
		}
	}
	return rows
}

// shareName: "pytorch 30+60" when one workload runs every tenant, else
// "pytorch 30 + probe-elem 60"; a balance tenant reads "balance 30";
// unlimited tenants "pytorch unlimited x2", "pytorch + probe-elem unlimited".
func shareName(ts []tenantSpec) string {
	if unlimitedAll(ts) {
		works := make([]string, len(ts))
		for i, t := range ts {
			works[i] = t.Work
		}
		if len(slices.Compact(slices.Clone(works))) == 1 {
			return fmt.Sprintf("%s unlimited x%d", ts[0].Work, len(ts))
		}
		return strings.Join(works, " + ") + " unlimited"
	}
	same := true
	for _, t := range ts {
		same = same && t.Work == ts[0].Work && !t.Balance
	}
	if same {
		return ts[0].Work + " " + targets(ts)
	}
	parts := make([]string, len(ts))
	for i, t := range ts {
		switch {
		case t.Balance && t.Work == ts[0].Work:
			parts[i] = fmt.Sprintf("balance %d", t.Cores)
		case t.Balance:
			parts[i] = fmt.Sprintf("%s balance %d", t.Work, t.Cores)
		default:
			parts[i] = fmt.Sprintf("%s %d", t.Work, t.Cores)
		}
	}
	return strings.Join(parts, " + ")
}

// targets: "30+60"; an unlimited tenant's reads "none".
func targets(ts []tenantSpec) string {
	s := make([]string, len(ts))
	for i, t := range ts {
		s[i] = fmt.Sprint(t.Cores)
		switch {
		case t.Unlimited:
			s[i] = "none"
		case t.Balance:
			s[i] = "b" + s[i]
		}
	}
	return strings.Join(s, "+")
}

// unlimitedAll: every tenant runs without a compute limit.
func unlimitedAll(ts []tenantSpec) bool {
	for _, t := range ts {
		if !t.Unlimited {
			return false
		}
	}
	return len(ts) > 0
}

// planned sums the budgets of the rows that will run.
func planned(rows []row) time.Duration {
	var d time.Duration
	for _, r := range rows {
		if r.Skip == "" {
			d += r.Budget
		}
	}
	return d
}

// renderPlan lists the rows with their planned time, and the total.
func renderPlan(rows []row, deadline time.Duration) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%-8s %-32s %8s  %s\n", "group", "row", "planned", "note")
	for _, r := range rows {
		budget := r.Budget.String()
		if r.Skip != "" {
			budget = "-"
		}
		fmt.Fprintf(&b, "%s\n", strings.TrimRight(fmt.Sprintf("%-8s %-32s %8s  %s", r.Group, r.Name, budget, r.Skip), " "))
	}
	fmt.Fprintf(&b, "# %d rows planned at %s on an H100, inside -deadline %s with %s to spare (run.sh takes ~30 s of it to build the probe and find the programs)\n",
		len(rows), planned(rows), deadline, deadline-planned(rows))
	return b.String()
}
