package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"k8s.io/utils/clock"

	"github.com/volcano-vgpu/volcano-vgpu/api"
	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/config"
	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/memguard"
	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/procmap"
)

// The guard row: a tenant lifts its own memory cap by removing the files it
// shares with libvcuda (its shared directory is writable, as in a
// container), and the node's memory guard (device-plugin/memguard, on the
// card's NVML) must kill the process that took it over. The first process
// holds three quarters of the cap; the second removes vcuda.region and
// vcuda.slots before its first CUDA call, so libvcuda books it from zero and
// grants it the whole cap again. Two processes' contexts and the tolerance
// stay allowed, so the cap is fixed (guardCapMiB) where their sum is
// exceeded.
const (
	guardCapMiB = 4096
	// guardPeriod: how often the guard checks here (the device plugin's
	// default is 2 s: a kill comes up to a period later there)
	guardPeriod = time.Second
	// guardSecs: how long the two processes hold their memory at most (the
	// row ends once the guard has killed one)
	guardSecs = 8.0
	// guardBudget: both probes start and allocate (under a second each) and
	// the guard kills within two of its periods
	guardBudget = 6 * time.Second
)

// guardOutcome is what the guard row saw.
type guardOutcome struct {
	firstMiB       uint64 // what NVML showed the first process hold before the tamperer started
	tampererMiB    uint64 // what the tamperer allocated (its JSON: lost when it is killed)
	kills          []memguard.Kill
	killedTamperer bool // a kill of a process below the tamperer's root
	killedFirst    bool
	after          time.Duration // from the tamperer's start to the kill
	tampererErr    error         // the tamperer's end: killed, or its program's failure
	// unlimited: probes the guard found running without libvcuda (its
	// memory-map check, as memoryGuard.unlimitedProcesses runs it); both
	// load it, so any is a false finding
	unlimited []memguard.Unlimited
}

// guard runs the guard row with program p on allocation path path.
func (h *host) guard(ctx context.Context, p *program, path string) (guardOutcome, error) {
	var g guardOutcome
	t, err := h.tenant(api.ComputeNone, 100, guardCapMiB)
	if err != nil {
		return g, err
	}
	firstGiB, tamperGiB := guardCapMiB*3/4/1024, guardCapMiB/1024
	roots := &rootSet{m: map[int]string{}}
	const first, tamperer = "first", "tamperer"
	owners := func() map[int]string {
		o, err := ownersOf("/proc", roots.snapshot())
		if err != nil {
			return nil
		}
		return o
	}
	defaults := config.Default().MemoryGuard
	r := &memguard.Runner{
		Source: &memguard.NVMLSource{Lib: h.nvml},
		List: func() []memguard.Tenant {
			return []memguard.Tenant{{Key: t.tenancy.Key, PodUID: t.tenancy.Key, Namespace: "gpu-check", Pod: "guard", Container: "main",
				UUID: h.uuid, CapMiB: guardCapMiB, Compute: true, Cores: 30}}
		},
		Owners: func(pid uint32) (string, bool) {
			_, ok := owners()[int(pid)]
			return t.tenancy.Key, ok
		},
		Policy: memguard.Policy{ToleranceMiB: defaults.ToleranceMiB, UncountedContextMiB: defaults.UncountedContextMiB},
		Period: guardPeriod, Clock: clock.RealClock{},
	}
	// the probes preload it from the host's path (their mount namespaces
	// are copies of the host's)
	lib := procmap.StatLibrary(h.lib, h.lib)
	r.Limited = func(pid uint32) (bool, error) { return procmap.Mapper{}.Maps(pid, lib) }
	var res struct {
		Allocated uint64 `json:"allocated_mib"`
		Refused   bool
	}
	var wg sync.WaitGroup
	var firstErr error
	firstCtx, stopFirst := context.WithCancel(ctx)
	defer stopFirst()
	wg.Add(1)
	go func() {
		defer wg.Done()
		firstErr = h.exec(firstCtx, t, p.cmd, p.env[path], &res, func(pid int) { roots.add(pid, first) },
			"hold", path, fmt.Sprint(firstGiB), fmt.Sprint(guardSecs))
	}()
	// the first process holds its memory before the tamperer starts
	heldBytes, err := h.waitHeld(ctx, owners, first, uint64(firstGiB)<<30)
	if err != nil {
		stopFirst()
		wg.Wait()
		return g, fmt.Errorf("the first process never held %d GiB: %w (its end: %v)", firstGiB, err, firstErr)
	}
	g.firstMiB = heldBytes >> 20
	started := time.Now()
	var tres struct {
		Allocated uint64 `json:"allocated_mib"`
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		env := append(append([]string{}, p.env[path]...), api.EnvSharedDir+"="+t.shared)
		g.tampererErr = h.exec(ctx, t, p.cmd, env, &tres, func(pid int) { roots.add(pid, tamperer) },
			"hold", path, fmt.Sprint(tamperGiB), fmt.Sprint(guardSecs), "unlink")
		g.tampererMiB = tres.Allocated
	}()
	tick := time.NewTicker(guardPeriod)
	defer tick.Stop()
	for watching := true; watching; {
		select {
		case <-ctx.Done():
			watching = false
		case <-done:
			watching = false
		case <-tick.C:
			o := owners()
			kills, unlimited := r.TickAll(ctx)
			g.unlimited = append(g.unlimited, unlimited...)
			for _, k := range kills {
				g.kills = append(g.kills, k)
				switch o[int(k.PID)] {
				case tamperer:
					g.killedTamperer, g.after = true, time.Since(started)
				case first:
					g.killedFirst = true
				}
			}
		}
	}
	<-done
	// the row has its answer: the first process, holding since, is stopped
	stopFirst()
	wg.Wait()
	if firstErr != nil && !errors.Is(firstErr, context.Canceled) && !g.killedFirst {
		return g, fmt.Errorf("the first process (within the cap): %w", firstErr)
	}
	return g, ctx.Err()
}

// waitHeld waits until processes of owner key hold at least want bytes on
// the GPU (NVML's running processes), or ctx ends.
func (h *host) waitHeld(ctx context.Context, owners func() map[int]string, key string, want uint64) (uint64, error) {
	src := &memguard.NVMLSource{Lib: h.nvml}
	for {
		ps, err := src.Running(h.uuid)
		if err != nil {
			return 0, err
		}
		o, sum := owners(), uint64(0)
		for _, p := range ps {
			if o[int(p.PID)] == key {
				sum += p.UsedBytes
			}
		}
		if sum >= want {
			return sum, nil
		}
		select {
		case <-ctx.Done():
			return sum, fmt.Errorf("NVML shows %d MiB of it: %w", sum>>20, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// guardVerdict: ok when the guard killed the tamperer and nothing else.
func guardVerdict(g guardOutcome) result {
	res := result{Target: fmt.Sprintf("%d MiB", guardCapMiB)}
	var held string
	if len(g.kills) > 0 {
		k := g.kills[0]
		held = fmt.Sprintf("%d MiB", k.HeldBytes>>20)
		res.Note = fmt.Sprintf("held %d MiB by NVML (limit %d MiB with %d processes' contexts and the tolerance); killed pid %d holding %d MiB",
			k.HeldBytes>>20, k.LimitBytes>>20, k.Processes, k.PID, k.ProcessBytes>>20)
	}
	switch {
	case len(g.unlimited) > 0:
		res.Status = statusMiss
		res.Note = fmt.Sprintf("the guard found pid %d without libvcuda, which every probe loads (its memory map); %s", g.unlimited[0].PID, res.Note)
	case g.killedFirst:
		res.Status = statusMiss
		res.Note = "killed the process within the cap; " + res.Note
	case !g.killedTamperer:
		res.Status = statusOver
		res.Note = strings.TrimSuffix(fmt.Sprintf("the tamperer was not killed (it ended: %v); %s", g.tampererErr, res.Note), "; ")
	default:
		res.Note = fmt.Sprintf("%s, %.1f s after it started; the first process (%d MiB by NVML) kept", res.Note, g.after.Seconds(), g.firstMiB)
	}
	res.Achieved = orDash(held)
	return res
}
