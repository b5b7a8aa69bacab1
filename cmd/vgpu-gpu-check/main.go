// Command vgpu-gpu-check runs libvcuda on a real NVIDIA GPU with programs
// nobody here wrote (PyTorch, CuPy, a CUDA C probe built with nvcc, whichever
// are installed) and prints what the limits achieved: the memory cap per
// allocation path and the compute shares of tenants sharing the GPU under the
// node's compute controller (the device plugin's, run in this process on the
// real NVML). Each tenant runs as in a container: its own pid namespace and
// mount namespace, the limiter preloaded through /etc/ld.so.preload and its
// limits read from /etc/vcuda/vcuda.config (bind-mounted, as the device plugin
// mounts them). Needs root (unshare, mount). Without a GPU it says so and
// exits 0. `make gpu-check` builds libvcuda and runs it.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

type options struct {
	lib     string  // libvcuda.so
	work    string  // scratch dir
	secs    float64 // per share scenario
	capMiB  uint64  // memory cap of the memory scenarios
	onlyMem bool
}

func main() {
	var o options
	flag.StringVar(&o.lib, "lib", "vcuda/_build/libvcuda.so", "libvcuda.so to test")
	flag.StringVar(&o.work, "work", "", "scratch directory (default: a new temp dir)")
	flag.Float64Var(&o.secs, "seconds", 12, "length of each share scenario; shares are measured over its second half")
	flag.Uint64Var(&o.capMiB, "cap-mib", 8192, "memory cap of the memory scenarios")
	flag.BoolVar(&o.onlyMem, "memory-only", false, "run the memory scenarios only")
	flag.Parse()
	if err := run(context.Background(), o); err != nil {
		fmt.Fprintln(os.Stderr, "gpu-check:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, o options) error {
	lib := nvml.New()
	if ret := lib.Init(); ret != nvml.SUCCESS {
		fmt.Printf("gpu-check: no NVIDIA GPU here (NVML: %v); nothing to check. Run it on a GPU node.\n", ret)
		return nil
	}
	defer lib.Shutdown()
	dev, ret := lib.DeviceGetHandleByIndex(0)
	if ret != nvml.SUCCESS {
		return fmt.Errorf("GPU 0: %v", ret)
	}
	uuid, _ := dev.GetUUID()
	name, _ := dev.GetName()
	mem, _ := dev.GetMemoryInfo()
	fmt.Printf("gpu-check on %s %s (%d MiB)\n", name, uuid, mem.Total>>20)
	if os.Geteuid() != 0 {
		return errors.New("needs root: each tenant gets its own pid and mount namespace (unshare, mount)")
	}
	libPath, err := filepath.Abs(o.lib)
	if err != nil {
		return err
	}
	if _, err := os.Stat(libPath); err != nil {
		return fmt.Errorf("%w (make -C vcuda builds it)", err)
	}
	if o.work == "" {
		if o.work, err = os.MkdirTemp("", "vgpu-gpu-check-"); err != nil {
			return err
		}
	}
	progs, err := findPrograms(ctx, o.work)
	if err != nil {
		return err
	}
	if len(progs) == 0 {
		fmt.Println("gpu-check: found none of python3+torch, python3+cupy, nvcc; nothing to run")
		return nil
	}
	h := &host{lib: libPath, work: o.work, uuid: uuid, nvml: lib}
	if err := h.prepare(); err != nil {
		return err
	}
	printContexts(ctx, dev, name, progs)
	fmt.Println("\nmemory cap (real GPU)")
	fmt.Printf("%-28s %10s %14s %s\n", "program/path", "cap MiB", "allocated MiB", "verdict")
	for _, p := range progs {
		for _, path := range p.memPaths {
			got, err := h.memory(ctx, p, path, o.capMiB)
			verdict := "ok"
			switch {
			case err != nil:
				verdict = "error: " + err.Error()
			case got > o.capMiB:
				verdict = "OVER THE CAP"
			case got+1024 < o.capMiB:
				verdict = "refused early"
			}
			fmt.Printf("%-28s %10d %14d %s\n", p.name+"/"+path, o.capMiB, got, verdict)
		}
	}
	if o.onlyMem {
		return nil
	}
	fmt.Println("\ncompute shares (real GPU, node controller on device-wide NVML, each tenant in its own pid namespace)")
	fmt.Printf("%-10s %-16s %-16s %-16s %s\n", "program", "targets %", "achieved %", "abs error", "solo rate")
	for _, p := range progs {
		solo, err := h.solo(ctx, p, o.secs)
		if err != nil {
			fmt.Printf("%-10s solo run failed: %v\n", p.name, err)
			continue
		}
		for _, targets := range [][]int{{10}, {30}, {50}, {70}, {90}, {30, 60}, {50, 50}, {10, 90}, {20, 30, 40}} {
			got, err := h.shares(ctx, p, targets, o.secs, solo)
			if err != nil {
				fmt.Printf("%-10s %-16s failed: %v\n", p.name, join(targets, "%d"), err)
				continue
			}
			errs := make([]float64, len(got))
			for i := range got {
				errs[i] = got[i] - float64(targets[i])
			}
			fmt.Printf("%-10s %-16s %-16s %-16s %.4g/s\n", p.name, join(targets, "%d"), join(got, "%.1f"), join(errs, "%+.1f"), solo)
		}
	}
	return nil
}

func join[T any](xs []T, f string) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = fmt.Sprintf(f, x)
	}
	return strings.Join(s, "+")
}

// withTimeout runs cmd with a deadline and returns its stdout.
func output(ctx context.Context, d time.Duration, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	out, err := exec.CommandContext(ctx, name, args...).Output()
	return string(out), err
}
