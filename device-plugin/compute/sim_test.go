package compute

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/volcano-vgpu/volcano-vgpu/api"
)

// A deterministic simulation of one GPU, its tenants' limiters and NVML, on a
// virtual clock, driving the real Runner (its files, history, per-process
// samples and the controller core). It runs in a fraction of a second, with
// no process, sleep or CPU-load dependence, so a control-loop change can be
// tried against many program mixes before the real-time suite on the fake
// driver (closedloop_test.go), which stays the judge.
//
// What it models, as a real GPU does it (REALGPU.md): kernels of each
// program cost their own GPU time per launched unit (units are libvcuda's
// blocks × warps, a shape, not a time) plus a launch floor; contexts
// time-slice (a slice, then the next context with work; a switch costs
// time); each tenant keeps up to depth kernels queued; device utilization is
// sampled every 100 ms in whole percent; per-process utilization once per
// second per process, off by up to ±20 points; processes no tenant owns run
// too. The limiter admits a launch while the node's allowance (plus its rate
// since the stamp, at most two periods) covers it, and holds the fallback
// rate once the node stops answering.

// simulate runs the tenants with the Runner; it returns each tenant's GPU
// share (percent) over the second half of its run, and the runner's last
// observation. stopController > 0 stops the node's controller then.
func simulate(t *testing.T, specs []simTenant, opts simOptions) (map[string]float64, Observation) {
	t.Helper()
	dir := t.TempDir()
	g := &simGPU{cur: -1, slice: opts.slice, switchCost: opts.switchCost, noise: opts.noise, seed: opts.seed, delay: opts.delay,
		wholeDevice: opts.wholeDevice, window: opts.window, phase: opts.phase, boost: opts.boost, clockSeen: !opts.blindClock,
		powerClock: opts.powerClock}
	if g.slice == 0 {
		g.slice = 2 * time.Millisecond
	}
	var list []Tenancy
	owners := map[uint32]string{}
	for i := range specs {
		tn := specs[i]
		tn.pid = uint32(1000 + i)
		if tn.prog.depth == 0 {
			tn.prog.depth = 4
		}
		if tn.owned {
			tn.ctl = filepath.Join(dir, tn.name+".control")
			tn.use = filepath.Join(dir, tn.name+".usage")
			b, err := api.NewControl(1)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(tn.ctl, b, 0o600); err != nil {
				t.Fatal(err)
			}
			if b, err = api.NewUsage(1); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(tn.use, b, 0o600); err != nil {
				t.Fatal(err)
			}
			tn.ctlMap, tn.useMap = simMap(t, tn.ctl), simMap(t, tn.use)
			owners[tn.pid] = tn.name
			share, policy := float64(tn.cores)/100, tn.policy
			if tn.cores == 0 {
				share = 1
			}
			if policy == "" {
				policy = api.ComputeFixed
			}
			list = append(list, Tenancy{Tenant: Tenant{Key: tn.name, Share: share, Policy: policy}, UUID: "GPU-sim",
				Devices: 1, ControlPath: tn.ctl, UsagePath: tn.use})
		}
		g.tenants = append(g.tenants, &tn)
	}
	var obs Observation
	var r *Runner
	r = &Runner{Source: g, Clock: func() uint64 { return uint64(g.now) }, Poll: 20 * time.Millisecond, Unconfined: opts.unconfined,
		Observe: func(o Observation) {
			obs = o
			if opts.observed != nil {
				opts.observed(g.now-100*time.Second, o)
			}
			if opts.fittedAt != nil && o.Fitted && *opts.fittedAt < 0 {
				*opts.fittedAt = g.now - 100*time.Second
			}
			if os.Getenv("SIM_TRACE") != "" {
				var b strings.Builder
				for _, d := range o.Decisions {
					fmt.Fprintf(&b, " %s[share %.2f meas %.3f k %.4g cal %v mode %d rate %.4g fb %.4g allow %d units %.0f]", d.Key, d.Share, d.Measured, d.Cost, d.Calibrated, d.Control.Mode, d.Control.Rate, d.Control.Fallback, d.Control.Allowance, d.Units)
				}
				if gg := r.gpus["GPU-sim"]; gg != nil {
					for k, st := range gg.tenants {
						c, _ := st.cal.cost()
						fmt.Fprintf(&b, " cal[%s n %.1f cost %.4g apart %v reg %v]", k, st.cal.n, c, gg.measured, gg.regressed)
					}
				}
				for _, tn := range g.tenants {
					fmt.Fprintf(&b, " {%s launched %d q %d waits %d}", tn.name, tn.launched, len(tn.queue), tn.waits)
				}
				t.Logf("%6.2fs busy %.3f foreign %.3f%s", (g.now - 100*time.Second).Seconds(), o.Busy, o.Foreign, b.String())
			}
		},
		List: func() ([]Tenancy, error) {
			var out []Tenancy
			for i, tn := range g.tenants {
				if tn.owned && g.now >= tn.start && g.now < tn.end() {
					out = append(out, list[indexOf(list, g.tenants[i].name)])
				}
			}
			return out, nil
		}}
	for _, tn := range g.tenants {
		tn.bounded = !opts.unboundQueue
	}
	if !opts.noAttribution {
		r.Owners = func(pid uint32) (string, bool) { k, ok := owners[pid]; return k, ok && !opts.blindOwners }
	}
	// CLOCK_MONOTONIC is the time since boot: the node starts long after it
	const base = 100 * time.Second
	var end time.Duration
	for _, tn := range g.tenants {
		tn.start += base
		end = max(end, tn.end())
	}
	ctx := context.Background()
	nextTick := base
	for g.now = base; g.now < end; g.now += simStep {
		if g.now >= nextTick && (opts.stopController == 0 || g.now < base+opts.stopController) {
			r.Tick(ctx)
			nextTick += r.Poll
		}
		for _, tn := range g.tenants {
			if g.now < tn.start+tn.setup || g.now >= tn.end() {
				continue
			}
			if opts.stallEvery > 0 && (g.now-base)%opts.stallEvery >= opts.stallEvery-opts.stall {
				continue // the host stalls every tenant; the GPU runs what they queued
			}
			tn.step(t, g.now, g.speed())
		}
		g.run(simStep)
	}
	r.closeAll()
	got := map[string]float64{}
	for _, tn := range g.tenants {
		from, to := tn.end()-secs(tn.secs)/2, tn.end()
		got[tn.name] = 100 * float64(sumBuckets(tn.busy, from, to)) / float64(to-from)
		if opts.rates != nil {
			var n int64
			for i := int(from / time.Millisecond); i < int(to/time.Millisecond) && i < len(tn.done); i++ {
				n += int64(tn.done[i])
			}
			opts.rates[tn.name] = float64(n) / (to - from).Seconds()
		}
	}
	return got, obs
}

type simOptions struct {
	slice, switchCost time.Duration
	noise             int
	seed              uint64 // of the noise (0: the suite's)
	stopController    time.Duration
	noAttribution     bool
	blindOwners       bool // the owners map no pid (no host pid view)
	noiseFree         bool // the case runs without per-process noise only
	delay             time.Duration
	wholeDevice       bool               // per-process samples as an H200 gives them (simGPU.Processes)
	window            time.Duration      // a device sample's averaging window (0: Busy's default)
	phase             time.Duration      // where the driver's sample clock is: stamps this long after whole periods
	boost             float64            // power-capped clocks (simGPU.speed): kernels up to 1 + boost as fast below full load
	powerClock        bool               // the clock follows power (simProgram.power), not busy time
	unconfined        bool               // Runner.Unconfined (limiter.confineSlots: false)
	rates             map[string]float64 // where set: each tenant's kernels completed per second over the second half
	blindClock        bool               // the driver does not report the SM clock
	fittedAt          *time.Duration     // where set: when the fit first split the tenants' costs (-1: never)
	// unboundQueue: the limiter does not bound its queue in a confining slot
	// (libvcuda before it did, vcuda/src/queue.c: sim_queue_test.go)
	unboundQueue bool
	// stall, stallEvery: the tenants' host stops them all for stall at the
	// end of every stallEvery (a busy node: the fake driver's tenants on a
	// 2-core machine stopped for some 60 ms), the GPU running their queues
	stall, stallEvery time.Duration
	observed          func(at time.Duration, o Observation) // where set: each of the runner's observations, at its time from the start
}

func secs(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// end is when a tenant stops launching: secs after its setup.
func (tn *simTenant) end() time.Duration { return tn.start + tn.setup + secs(tn.secs) }

func indexOf(list []Tenancy, key string) int {
	for i, t := range list {
		if t.Key == key {
			return i
		}
	}
	panic(key)
}

// simMap maps a file shared, read-write.
func simMap(t *testing.T, path string) []byte {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	b, err := syscall.Mmap(int(f.Fd()), 0, int(st.Size()), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Munmap(b) })
	return b
}

func simString(got map[string]float64) string {
	keys := make([]string, 0, len(got))
	for k := range got {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %.1f", k, got[k]))
	}
	return strings.Join(parts, ", ")
}
