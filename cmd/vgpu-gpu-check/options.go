package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// options are the check's flags, decoded and validated once.
type options struct {
	lib         string        // libvcuda.so
	work        string        // scratch dir ("" = a new temp dir)
	programsDir string        // the programs' sources ("" = the copies compiled into the binary)
	probe       string        // the CUDA C probe: "" = build it with nvcc if present, "off", or a built binary
	slicing     string        // the slicing rows' program (slicing.cu), as probe
	out         string        // also write the table here
	trace       string        // write each share row's controller periods here ("" = none)
	deadline    time.Duration // the whole run
	timeout     time.Duration // one row
	secs        float64       // one share row's tenants run this long; shares are measured over the second half
	capMiB      uint64        // memory cap of the memory rows
	groups      []string      // rows to run, in plan order
	use         []string      // programs to use
	share       string        // the program of the single, pair, triple and balance rows
	planOnly    bool          // print the rows and their planned time, run nothing
	mpsControl  string        // nvidia-cuda-mps-control (the mps rows)
	unconfined  bool          // the share rows' controller with limiter.confineSlots: false
}

// groupOrder lists the row groups in the order they run.
func groupOrder() []string {
	return []string{"context", "memory", "guard", "single", "pair", "slicing", "mixed", "triple", "balance", "mps", "deep"}
}

// defaultGroups are the groups a run without -only runs: all but deep, which
// the default deadline leaves no time for (its rows are the fit's on a queue
// as deep as CUDA lets it grow: -only deep, or with the share rows it checks).
func defaultGroups() []string {
	return slices.DeleteFunc(groupOrder(), func(g string) bool { return g == "deep" })
}

// programNames lists the programs the check knows.
func programNames() []string { return []string{"pytorch", "cupy", "probe"} }

func parseOptions(args []string, stderr io.Writer) (options, error) {
	var o options
	var groups, skip, use string
	fs := flag.NewFlagSet("vgpu-gpu-check", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.lib, "lib", "vcuda/_build/libvcuda.so", "libvcuda.so to test")
	fs.StringVar(&o.work, "work", "", "scratch directory (default: a new temp dir)")
	fs.StringVar(&o.programsDir, "programs", "", "directory with torch_check.py, cupy_check.py and probe.cu (default: the copies built into this binary)")
	fs.StringVar(&o.probe, "probe", "", `the CUDA C probe: a binary built from probe.cu, "off", or empty to build it here with nvcc`)
	fs.StringVar(&o.slicing, "slicing", "", `the slicing rows' program: a binary built from slicing.cu, "off", or empty to build it here with nvcc`)
	fs.StringVar(&o.out, "out", "", "also write the table to this file")
	fs.StringVar(&o.trace, "trace", "", "write each share row's controller periods (busy, clock, each tenant's target, measured share, cost, rate) to a .tsv in this directory")
	fs.DurationVar(&o.deadline, "deadline", 7*time.Minute+40*time.Second, "total deadline; rows that no longer fit are reported as skipped")
	fs.DurationVar(&o.timeout, "scenario-timeout", 60*time.Second, "timeout of one row; a row cut by it is reported as TIMEOUT")
	fs.Float64Var(&o.secs, "seconds", 10, "how long each tenant of a share row runs; shares are measured over the second half")
	fs.Uint64Var(&o.capMiB, "cap-mib", 8192, "memory cap of the memory rows")
	fs.StringVar(&groups, "only", strings.Join(defaultGroups(), ","), "row groups to run: "+strings.Join(groupOrder(), ","))
	fs.StringVar(&skip, "skip", "", "row groups to leave out of -only (e.g. mps)")
	fs.StringVar(&o.mpsControl, "mps-control", "nvidia-cuda-mps-control", "the MPS control program of the mps rows (a name in PATH or a path); they never change the GPU's compute mode")
	fs.StringVar(&use, "use", strings.Join(programNames(), ","), "programs to use: "+strings.Join(programNames(), ","))
	fs.StringVar(&o.share, "share-program", "pytorch", "program of the single, pair, triple and balance rows: "+strings.Join(programNames(), ","))
	fs.BoolVar(&o.unconfined, "unconfined", false, "run the share rows' controller with limiter.confineSlots: false (launch slots that do not confine, as before 2026-11-30): the fallback's figures, beside a run without it")
	fs.BoolVar(&o.planOnly, "plan", false, "print the rows the flags select and the time planned for each on an H100, run nothing")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q: every setting is a flag (-h lists them)", fs.Args())
	}
	var err error
	if o.groups, err = pick("-only", groups, groupOrder()); err != nil {
		return o, err
	}
	if skip != "" {
		out, err := pick("-skip", skip, groupOrder())
		if err != nil {
			return o, err
		}
		o.groups = slices.DeleteFunc(o.groups, func(g string) bool { return slices.Contains(out, g) })
		if len(o.groups) == 0 {
			return o, fmt.Errorf("-skip %s leaves no row group of -only %s", skip, groups)
		}
	}
	if o.use, err = pick("-use", use, programNames()); err != nil {
		return o, err
	}
	if !slices.Contains(programNames(), o.share) {
		return o, fmt.Errorf("-share-program %q: use one of %s", o.share, strings.Join(programNames(), ", "))
	}
	switch {
	case o.deadline <= 0:
		return o, errors.New("-deadline must be positive (e.g. 6m)")
	case o.timeout <= 0:
		return o, errors.New("-scenario-timeout must be positive (e.g. 60s)")
	case o.secs < 2:
		return o, fmt.Errorf("-seconds %g is too short for a share to settle: use at least 2", o.secs)
	case o.capMiB < 1024:
		return o, fmt.Errorf("-cap-mib %d is below one 1 GiB chunk: use at least 1024", o.capMiB)
	case o.mpsControl == "":
		return o, errors.New("-mps-control is empty: name nvidia-cuda-mps-control (or leave the mps rows out: -skip mps)")
	}
	if need := shareBudget(o.secs, 3); o.timeout < need && (slices.Contains(o.groups, "single") || slices.Contains(o.groups, "triple")) {
		return o, fmt.Errorf("-scenario-timeout %v is shorter than a share row of -seconds %g takes (about %v): raise -scenario-timeout or lower -seconds", o.timeout, o.secs, need)
	}
	return o, nil
}

// pick splits a comma list and checks every name against valid; the result
// keeps valid's order.
func pick(flagName, list string, valid []string) ([]string, error) {
	var out []string
	for _, s := range strings.Split(list, ",") {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		if !slices.Contains(valid, s) {
			return nil, fmt.Errorf("%s: unknown %q; use a comma list of %s", flagName, s, strings.Join(valid, ","))
		}
	}
	for _, v := range valid {
		for _, s := range strings.Split(list, ",") {
			if strings.TrimSpace(s) == v {
				out = append(out, v)
				break
			}
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: empty; use a comma list of %s", flagName, strings.Join(valid, ","))
	}
	return out, nil
}
