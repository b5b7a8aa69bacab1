package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/volcano-vgpu/volcano-vgpu/api"
	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/mps"
)

// The mps rows run tenants as clients of one MPS server, the way the device
// plugin runs an MPS GPU: its own control daemon (device-plugin/mps) with the
// pipe and log directories under the work dir, the server started for this
// user and held to the largest share of the row, each tenant with its
// limiter config's MPS percentage and memory cap and the pipe directory
// read-only at api.MPSPipeDir in its mount namespace (as Allocate mounts it;
// the check creates that empty mount point on the host, as it does
// /etc/vcuda, and removes it at the end). They never change
// the GPU's compute mode: the daemon runs in the mode the GPU is in (the
// lent GPU machines' settings are left as they are), so a process that
// bypasses MPS could still open its own context there; production sets
// EXCLUSIVE_PROCESS (mps.setComputeMode).

// mpsStart is the planned time of the daemon's start or check and the
// server's percentage, per row.
const mpsStart = 2 * time.Second

// mpsRun is the control daemon of the mps rows, started by the first and
// stopped at the end of the run.
type mpsRun struct {
	d   *mps.Daemon
	sup *mps.Supervisor

	created []string // mount point directories this run created, deepest first

	mu   sync.Mutex
	last error // the supervisor's last report
}

// mountPoint creates api.MPSPipeDir and the directories above it that are
// missing, remembering them for stopMPS.
func (m *mpsRun) mountPoint() error {
	var missing []string
	for d := api.MPSPipeDir; d != "/"; d = filepath.Dir(d) {
		if _, err := os.Stat(d); err == nil {
			break
		}
		missing = append(missing, d)
	}
	for i := len(missing) - 1; i >= 0; i-- {
		if err := os.Mkdir(missing[i], 0o755); err != nil {
			return fmt.Errorf("mount point of the MPS pipe directory: %w", err)
		}
		m.created = append([]string{missing[i]}, m.created...)
	}
	return nil
}

func (m *mpsRun) report(_ string, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.last = err
}

func (m *mpsRun) health() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.last
}

// mpsReady starts the daemon (first row) or checks it, and holds its server
// to ceiling percent. It returns the pipe directory.
func (c *check) mpsReady(ctx context.Context, ceiling uint32) (string, error) {
	if c.mps == nil {
		cmd, err := exec.LookPath(c.o.mpsControl)
		if err != nil {
			return "", fmt.Errorf("-mps-control %s: %v: %w", c.o.mpsControl, err, errUnavailable)
		}
		m := &mpsRun{d: mps.New(filepath.Join(c.h.work, "mps"), c.h.uuid, cmd, 15*time.Second)}
		if err := m.mountPoint(); err != nil {
			return "", err
		}
		// Modes nil: the compute mode is left as it is.
		m.sup = &mps.Supervisor{Daemons: []*mps.Daemon{m.d}, UID: int64(os.Geteuid()), Report: m.report}
		c.mps = m
		m.sup.Start(ctx)
	} else {
		c.mps.sup.Check(ctx)
	}
	if err := c.mps.health(); err != nil {
		return "", fmt.Errorf("MPS daemon: %w", err)
	}
	if err := c.mps.sup.Hold(ctx, c.h.uuid, ceiling); err != nil {
		return "", fmt.Errorf("holding the MPS server at %d%%: %w", ceiling, err)
	}
	return c.mps.d.PipeDir(), nil
}

// mpsAfter checks the daemon after a row: a server that faulted during it
// fails the row.
func (c *check) mpsAfter(ctx context.Context) error {
	c.mps.sup.Check(ctx)
	if err := c.mps.health(); err != nil {
		return fmt.Errorf("MPS daemon after the row: %w", err)
	}
	return nil
}

// stopMPS asks the daemon to quit, waits until it no longer answers, and
// removes the mount point directories the run created.
func (c *check) stopMPS() error {
	if c.mps == nil {
		return nil
	}
	err := c.quitMPS()
	for _, d := range c.mps.created { // deepest first
		if rerr := os.Remove(d); rerr != nil {
			err = errors.Join(err, rerr)
		}
	}
	return err
}

func (c *check) quitMPS() error {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := c.mps.d.Stop(ctx); err != nil && !errors.Is(err, mps.ErrNoAnswer) {
		return err
	}
	for ctx.Err() == nil {
		if _, err := c.mps.d.Control(ctx, "get_server_list"); err != nil {
			return nil
		}
		time.Sleep(200 * time.Millisecond)
	}
	return fmt.Errorf("the MPS control daemon in %s still answers after quit", c.mps.d.Dir)
}

// runMPS runs an mps row.
func (c *check) runMPS(ctx context.Context, r row) (result, error) {
	if r.Kind == kindMPSMemory {
		p, err := c.program(r.Program)
		if err != nil {
			return result{}, err
		}
		pipe, err := c.mpsReady(ctx, 100)
		if err != nil {
			return result{}, err
		}
		got, refused, err := c.h.mpsMemory(ctx, p, r.Path, c.o.capMiB, memSeconds(c.o.timeout), pipe)
		st, note := memoryVerdict(c.o.capMiB, got, refused)
		res := result{Target: fmt.Sprintf("%d MiB", c.o.capMiB), Achieved: fmt.Sprintf("%d MiB", got), Status: st, Note: note}
		if err == nil {
			err = c.mpsAfter(ctx)
		}
		return res, err
	}
	var ceiling uint32
	for _, t := range r.Tenants {
		if _, err := c.program(programOf(t.Work)); err != nil {
			return result{}, err
		}
		ceiling = max(ceiling, uint32(t.Cores))
	}
	pipe, err := c.mpsReady(ctx, ceiling)
	if err != nil {
		return result{Target: targets(r.Tenants)}, err
	}
	got, note, err := c.h.mpsShares(ctx, c.progs, r.Tenants, c.o.secs, c.solo, c.o.capMiB, pipe)
	if err == nil {
		err = c.mpsAfter(ctx)
	}
	if err != nil {
		return result{Target: targets(r.Tenants), Note: note}, err
	}
	res, err := shareVerdict(r.Tenants, got)
	res.Note += fmt.Sprintf("; server at %d%%", ceiling)
	if note != "" {
		res.Note += "; " + note
	}
	return res, err
}

// mpsTenant is a tenant on the MPS GPU: its limiter config carries the MPS
// percentage (libvcuda sets CUDA_MPS_ACTIVE_THREAD_PERCENTAGE and the pinned
// limit from it), no launch throttle and the memory cap; it sees the pipe
// directory read-only. env is what Allocate sets.
func (h *host) mpsTenant(cores uint32, capMiB uint64, pipe string) (*tenant, []string, error) {
	t, err := h.tenantWith(api.ComputeNone, 100, capMiB, cores)
	if err != nil {
		return nil, nil, err
	}
	t.mpsPipe = pipe
	env := []string{api.EnvMPSPipeDir + "=" + api.MPSPipeDir, fmt.Sprintf("%s=%d", api.EnvMPSThreads, cores),
		fmt.Sprintf("%s=0=%dM", api.EnvMPSPinnedMem, capMiB)}
	return t, env, nil
}

// mpsMemory is memory on one path from an MPS client of 100%.
func (h *host) mpsMemory(ctx context.Context, p *program, path string, capMiB uint64, secs float64, pipe string) (uint64, bool, error) {
	mem, ret := h.dev.GetMemoryInfo()
	if ret != nvml.SUCCESS {
		return 0, false, fmt.Errorf("NVML memory info: %v", ret)
	}
	chunks, err := memBound(capMiB, mem.Free>>20)
	if err != nil {
		return 0, false, err
	}
	t, env, err := h.mpsTenant(100, capMiB, pipe)
	if err != nil {
		return 0, false, err
	}
	var r struct {
		Allocated uint64 `json:"allocated_mib"`
		Refused   bool
	}
	err = h.exec(ctx, t, p.cmd, append(slices.Clone(p.env[path]), env...), &r, nil, "mem", path, fmt.Sprint(chunks), fmt.Sprint(secs))
	return r.Allocated, r.Refused, err
}

// mpsShares runs one MPS client per spec together (no node controller: the
// SM partition holds the shares) and returns each one's rate as a
// percentage of its workload's solo rate, and how many MPS client processes
// NVML listed halfway (where this NVML can list them).
func (h *host) mpsShares(ctx context.Context, progs map[string]*program, ts []tenantSpec, secs float64, solo map[string]float64, capMiB uint64, pipe string) ([]float64, string, error) {
	type client struct {
		t   *tenant
		env []string
	}
	cs := make([]client, len(ts))
	for i, s := range ts {
		if _, ok := solo[s.Work]; !ok {
			return nil, "", fmt.Errorf("no solo rate of %s: its solo row did not finish", s.Work)
		}
		t, env, err := h.mpsTenant(uint32(s.Cores), capMiB, pipe)
		if err != nil {
			return nil, "", err
		}
		cs[i] = client{t, env}
	}
	line, err := newStartLine(h.work, len(ts))
	if err != nil {
		return nil, "", err
	}
	defer line.remove()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	seen := make(chan string, 1)
	go func() {
		note := ""
		line.after(ctx, func() {
			select {
			case <-ctx.Done():
			case <-time.After(time.Duration(secs / 2 * float64(time.Second))):
				note = h.mpsClients()
			}
		})
		seen <- note
	}()
	got, err := h.runTogether(ctx, progs, ts, secs, solo, line, func(i int) (*tenant, []string, func(int)) { return cs[i].t, cs[i].env, nil })
	cancel()
	note := <-seen
	if n := line.note(); n != "" {
		note = strings.TrimPrefix(note+"; "+n, "; ")
	}
	return got, note, err
}

// mpsClients: "nvml lists 2 MPS client processes", or "" where this NVML
// cannot list them (the project's fake).
func (h *host) mpsClients() string {
	if !has(h.nvml, "nvmlDeviceGetMPSComputeRunningProcesses") {
		return ""
	}
	procs, ret := h.dev.GetMPSComputeRunningProcesses()
	if ret != nvml.SUCCESS {
		return "nvml MPS processes: " + strings.ToLower(ret.Error())
	}
	return fmt.Sprintf("nvml lists %d MPS client processes", len(procs))
}
