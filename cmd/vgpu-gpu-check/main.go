// Command vgpu-gpu-check runs libvcuda on a real NVIDIA GPU with programs
// nobody here wrote (PyTorch, CuPy, a CUDA C probe built with nvcc, whichever
// are installed) and prints what the limits achieved: the CUDA context per
// program (the limiter.contextMiB setting), the memory cap per allocation
// path and the compute shares of tenants sharing the GPU under the node's
// compute controller (the device plugin's, run in this process on the real
// NVML). Each tenant runs as in a container: its own pid namespace and mount
// namespace, the limiter preloaded through /etc/ld.so.preload and its limits
// read from /etc/vcuda/vcuda.config (bind-mounted, as the device plugin mounts
// them). Needs root (unshare, mount). The run has a total deadline and every
// row a timeout; rows that no longer fit are reported as skipped. Without a
// GPU it says so and exits 0.
//
// `make gpu-check` builds libvcuda and runs it where Go is present;
// `make gpu-bundle` makes a folder that runs it where Go is not (run.sh).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

func main() {
	o, err := parseOptions(os.Args[1:], os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "gpu-check:", err)
		os.Exit(2)
	}
	// SIGTERM (run.sh's timeout) or ^C ends the rows in flight, their tenants' namespaces with
	// them, and still prints the table's footer.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := run(ctx, o, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "gpu-check:", err)
		os.Exit(1)
	}
}

// noGPU is the line printed (exit 0) where there is nothing to check.
const noGPU = "gpu-check: no NVIDIA GPU here (%s); nothing to check. Run it on a GPU node.\n"

func run(ctx context.Context, o options, stdout io.Writer) error {
	if o.planOnly {
		fmt.Fprint(stdout, renderPlan(plan(o), o.deadline))
		return nil
	}
	start := time.Now()
	ctx, cancel := context.WithDeadline(ctx, start.Add(o.deadline))
	defer cancel()
	lib := nvml.New()
	if ret := lib.Init(); ret != nvml.SUCCESS {
		fmt.Fprintf(stdout, noGPU, "NVML: "+ret.Error())
		return nil
	}
	defer lib.Shutdown()
	if n, ret := lib.DeviceGetCount(); ret != nvml.SUCCESS || n == 0 {
		fmt.Fprintf(stdout, noGPU, "NVML lists no device")
		return nil
	}
	dev, ret := lib.DeviceGetHandleByIndex(0)
	if ret != nvml.SUCCESS {
		return fmt.Errorf("GPU 0: %v", ret)
	}
	if os.Geteuid() != 0 {
		return errors.New("needs root: each tenant gets its own pid and mount namespace (unshare, mount); run it with sudo")
	}
	libPath, err := filepath.Abs(o.lib)
	if err != nil {
		return err
	}
	if _, err := os.Stat(libPath); err != nil {
		return fmt.Errorf("%w (make -C vcuda builds it; in the bundle run.sh passes its libvcuda.so)", err)
	}
	if o.work == "" {
		if o.work, err = os.MkdirTemp("", "vgpu-gpu-check-"); err != nil {
			return err
		}
	}
	w := stdout
	if o.out != "" {
		f, err := os.Create(o.out)
		if err != nil {
			return fmt.Errorf("-out: %w", err)
		}
		defer f.Close()
		w = io.MultiWriter(stdout, f)
	}
	progs := findPrograms(ctx, o, o.work)
	hd := readHeader(ctx, lib, dev, o, progs)
	rows := plan(o)
	hd.Planned = planned(rows)
	fmt.Fprint(w, hd.render())
	uuid, _ := dev.GetUUID()
	h := &host{lib: libPath, work: o.work, uuid: uuid, nvml: lib, dev: dev, unconfined: o.unconfined}
	if err := h.prepare(); err != nil {
		return err
	}
	c := &check{o: o, h: h, progs: progs, solo: map[string]float64{}, slicing: &program{missing: "not planned"}}
	if slices.Contains(o.groups, "slicing") {
		c.slicing = slicingProgram(ctx, o, o.work)
	}
	e := executor{deadline: start.Add(o.deadline), timeout: o.timeout, now: time.Now, run: c.run}
	outs := e.execute(ctx, rows, func(oc outcome) { fmt.Fprint(w, oc.render()) })
	if err := c.stopMPS(); err != nil {
		fmt.Fprintf(w, "# stopping the MPS control daemon of the mps rows: %v\n", err)
	}
	fmt.Fprint(w, footer(outs, hd.GPU, time.Since(start)))
	return nil
}

// readHeader reads the GPU model, driver and CUDA versions and the
// programs' versions.
func readHeader(ctx context.Context, lib nvml.Interface, dev nvml.Device, o options, progs map[string]*program) header {
	h := header{Date: time.Now().UTC().Format(time.RFC3339), Deadline: o.deadline, Timeout: o.timeout, Secs: o.secs, CapMiB: o.capMiB, Unconfined: o.unconfined}
	h.GPU, _ = dev.GetName()
	h.UUID, _ = dev.GetUUID()
	if mem, ret := dev.GetMemoryInfo(); ret == nvml.SUCCESS {
		h.MemMiB = mem.Total >> 20
	}
	h.Driver, h.CUDA = "unknown", "unknown"
	if has(lib, "nvmlSystemGetDriverVersion") {
		h.Driver, _ = lib.SystemGetDriverVersion()
	}
	if has(lib, "nvmlSystemGetCudaDriverVersion") {
		if v, ret := lib.SystemGetCudaDriverVersion(); ret == nvml.SUCCESS {
			h.CUDA = fmt.Sprintf("%d.%d", v/1000, v%1000/10)
		}
	}
	for _, name := range o.use {
		p := progs[name]
		switch {
		case p.missing != "":
			h.Versions = append(h.Versions, name+" (not run: "+p.missing+")")
		case p.version != "":
			h.Versions = append(h.Versions, p.version)
		}
	}
	if v := nvccVersion(ctx); v != "" {
		h.Versions = append(h.Versions, v)
	}
	return h
}

// has says whether the loaded NVML has a function: every driver has those
// the check calls, but a call to a missing one ends the process (an old
// driver, or the project's fake NVML in the tests).
func has(lib nvml.Interface, symbol string) bool {
	return lib.Extensions().LookupSymbol(symbol) == nil
}

// check runs the rows on this machine.
type check struct {
	o     options
	h     *host
	progs map[string]*program
	solo  map[string]float64 // rate of each workload alone, from its solo row
	mps   *mpsRun            // the mps rows' control daemon (nil: not started)
	// slicing: the slicing rows' program (found or built when they are
	// planned; else missing says why not)
	slicing *program
}

// tracer opens a share row's trace for its tenants (nil without -trace).
func (c *check) tracer(r row) func(keys []string) (*periodTrace, error) {
	if c.o.trace == "" {
		return nil
	}
	return func(keys []string) (*periodTrace, error) {
		names := make(map[string]string, len(keys))
		for i, key := range keys {
			t := r.Tenants[i]
			target := fmt.Sprint(t.Cores)
			switch {
			case t.Unlimited:
				target = "none"
			case t.Balance:
				target += "b"
			}
			names[key] = fmt.Sprintf("%d:%s@%s", i, t.Work, target)
		}
		return openTrace(c.o.trace, r, names)
	}
}

func (c *check) program(name string) (*program, error) {
	p := c.progs[name]
	if p == nil {
		return nil, fmt.Errorf("%s is not in -use: %w", name, errUnavailable)
	}
	if p.missing != "" {
		return nil, fmt.Errorf("%s: %s: %w", name, p.missing, errUnavailable)
	}
	return p, nil
}

func (c *check) run(ctx context.Context, r row) (result, error) {
	switch r.Kind {
	case kindContext:
		p, err := c.program(r.Program)
		if err != nil {
			return result{}, err
		}
		mib, err := contextMiB(ctx, c.h.nvml, c.h.dev, p)
		return result{Achieved: fmt.Sprintf("%d MiB", mib), ContextMiB: mib}, err
	case kindMemory:
		p, err := c.program(r.Program)
		if err != nil {
			return result{}, err
		}
		got, refused, err := c.h.memory(ctx, p, r.Path, c.o.capMiB, memSeconds(c.o.timeout))
		st, note := memoryVerdict(c.o.capMiB, got, refused)
		return result{Target: fmt.Sprintf("%d MiB", c.o.capMiB), Achieved: fmt.Sprintf("%d MiB", got), Status: st, Note: note}, err
	case kindSolo:
		p, err := c.program(programOf(r.Work))
		if err != nil {
			return result{}, err
		}
		rate, dev, err := c.h.solo(ctx, p, r.Work, c.o.secs)
		if err != nil {
			return result{}, err
		}
		c.solo[r.Work] = rate
		return result{Target: "100", Achieved: fmt.Sprintf("%.4g/s", rate), Note: dev.summary()}, nil
	case kindShare:
		for _, t := range r.Tenants {
			if _, err := c.program(programOf(t.Work)); err != nil {
				return result{}, err
			}
		}
		secs := c.o.secs
		if r.Secs > 0 {
			secs = r.Secs
		}
		got, note, gpuTime, err := c.h.shares(ctx, c.progs, r.Tenants, secs, c.solo, c.tracer(r))
		if r.Secs > 0 {
			note = strings.TrimSuffix(fmt.Sprintf("tenants ran %g s; %s", secs, note), "; ")
		}
		if err != nil {
			return result{Target: targets(r.Tenants), Note: note}, err
		}
		res, err := shareVerdict(r.Tenants, got)
		if note != "" {
			res.Note += "; " + note
		}
		res.GPUTime = gpuTime
		return res, err
	case kindGuard:
		p, err := c.program(r.Program)
		if err != nil {
			return result{}, err
		}
		g, err := c.h.guard(ctx, p, r.Path)
		if err != nil {
			return result{Target: fmt.Sprintf("%d MiB", guardCapMiB)}, err
		}
		return guardVerdict(g), nil
	case kindMPS, kindMPSMemory:
		return c.runMPS(ctx, r)
	case kindSlicing:
		return c.runSlicing(ctx, r)
	}
	return result{}, fmt.Errorf("row %q: unknown kind %d", r.Name, r.Kind)
}
