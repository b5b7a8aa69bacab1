package mps

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// ComputeModes sets a GPU's compute mode: EXCLUSIVE_PROCESS (exclusive true:
// only the MPS server opens a context there) or DEFAULT.
type ComputeModes interface {
	SetExclusive(uuid string, exclusive bool) error
}

// computeModeMarker, in a daemon's directory, says the plugin set the GPU's
// compute mode (and so restores it when the GPU leaves MPS mode).
const computeModeMarker = "compute-mode-set"

// Supervisor keeps the daemons of a node's MPS GPUs running and reports each
// GPU's MPS health.
type Supervisor struct {
	Daemons []*Daemon
	// UID is the user each daemon's server is started for.
	UID int64
	// Interval between checks.
	Interval time.Duration
	Clock    clock.WithTicker
	// Modes sets the compute mode of each MPS GPU; nil leaves it alone.
	Modes ComputeModes
	// Report receives each GPU's MPS health after every check (nil: healthy).
	Report func(uuid string, err error)
	// Ceiling is the active-thread percentage each GPU's server is held to:
	// the largest share booked on it (clients may lower their own, never
	// raise it above the server's). nil: 100.
	Ceiling func(uuid string) uint32

	mu      sync.Mutex // watches, and the commands of one daemon at a time
	watches map[string]*watch

	heldMu sync.Mutex        // held alone: read at scrape time, never behind a command
	held   map[string]uint32 // GPU → the percentage its server was last held to
}

// watch is what the supervisor remembers of one daemon.
type watch struct {
	offset  int64          // control.log read so far
	faulted map[int]string // server pid → the fault seen
	ceiling uint32         // the ceiling last set on server pid (0: none)
	pid     int
}

// Start prepares every GPU (compute mode, daemon started or adopted, its
// server started) and reports each GPU's health. A GPU that cannot be
// prepared is reported unhealthy; Check tries it again.
func (s *Supervisor) Start(ctx context.Context) {
	logger := klog.FromContext(ctx)
	for _, d := range s.Daemons {
		if s.Modes != nil {
			if err := s.Modes.SetExclusive(d.UUID, true); err != nil {
				s.report(d, fmt.Errorf("%w: setting EXCLUSIVE_PROCESS on GPU %s: %w (or set mps.setComputeMode: false)", ErrComputeMode, d.UUID, err))
				continue
			}
			if err := os.MkdirAll(d.Dir, 0o755); err == nil {
				_ = os.WriteFile(filepath.Join(d.Dir, computeModeMarker), nil, 0o644)
			}
		}
		adopted, err := d.Start(ctx)
		if err != nil {
			s.report(d, err)
			continue
		}
		logger.V(2).Info("MPS control daemon", "gpu", d.UUID, "adopted", adopted, "pipeDir", d.PipeDir())
		s.report(d, s.check(ctx, d))
	}
}

// Run starts the daemons, then checks them every Interval until ctx ends.
func (s *Supervisor) Run(ctx context.Context) error {
	s.Start(ctx)
	t := s.Clock.NewTicker(s.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C():
			s.Check(ctx)
		}
	}
}

// Check checks every daemon once and reports.
func (s *Supervisor) Check(ctx context.Context) {
	for _, d := range s.Daemons {
		s.report(d, s.check(ctx, d))
	}
}

func (s *Supervisor) ceiling(uuid string) uint32 {
	if s.Ceiling == nil {
		return 100
	}
	if c := s.Ceiling(uuid); c >= 1 && c <= 100 {
		return c
	}
	return 100
}

// Hold sets GPU uuid's ceiling to pct now (a container is about to start:
// its clients take the ceiling when they connect); checks keep following
// Ceiling afterwards.
func (s *Supervisor) Hold(ctx context.Context, uuid string, pct uint32) error {
	for _, d := range s.Daemons {
		if d.UUID != uuid {
			continue
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		w := s.watchOf(uuid)
		if w.pid == 0 || pct == w.ceiling || pct < 1 || pct > 100 {
			return nil
		}
		return s.setCeiling(ctx, d, w, w.pid, pct)
	}
	return nil
}

// setCeiling holds server pid (and the servers started later) to pct.
func (s *Supervisor) setCeiling(ctx context.Context, d *Daemon, w *watch, pid int, pct uint32) error {
	for _, cmd := range []string{fmt.Sprintf("set_default_active_thread_percentage %d", pct), fmt.Sprintf("set_active_thread_percentage %d %d", pid, pct)} {
		if _, err := d.Control(ctx, cmd); err != nil {
			return err
		}
	}
	w.pid, w.ceiling = pid, pct
	s.heldMu.Lock()
	if s.held == nil {
		s.held = map[string]uint32{}
	}
	s.held[d.UUID] = pct
	s.heldMu.Unlock()
	return nil
}

// Held is the active-thread percentage GPU uuid's server was last held to
// (0: none set yet). It does not wait for a check in progress.
func (s *Supervisor) Held(uuid string) uint32 {
	s.heldMu.Lock()
	defer s.heldMu.Unlock()
	return s.held[uuid]
}

func (s *Supervisor) report(d *Daemon, err error) {
	if s.Report != nil {
		s.Report(d.UUID, err)
	}
}

func (s *Supervisor) watchOf(uuid string) *watch {
	if s.watches == nil {
		s.watches = map[string]*watch{}
	}
	w := s.watches[uuid]
	if w == nil {
		w = &watch{faulted: map[int]string{}}
		s.watches[uuid] = w
	}
	return w
}

// check is one round for d: the daemon answers (else it is started again),
// no server of it is faulted (in its status or its log), and a server for
// UID is ACTIVE (else one is started).
func (s *Supervisor) check(ctx context.Context, d *Daemon) error {
	logger := klog.FromContext(ctx).WithValues("gpu", d.UUID)
	ceiling := s.ceiling(d.UUID) // before s.mu: Ceiling may take its owner's lock, which Hold's caller holds
	s.mu.Lock()
	defer s.mu.Unlock()
	w := s.watchOf(d.UUID)
	servers, err := d.Servers(ctx)
	if err != nil {
		if _, serr := d.Start(ctx); serr != nil {
			return fmt.Errorf("%w; starting it again failed: %v", err, serr)
		}
		logger.Info("Started the MPS control daemon again: it did not answer", "err", err)
		return err
	}
	for _, line := range s.readLog(d, w) {
		switch {
		case logFault.MatchString(line):
			if m := logServer.FindStringSubmatch(line); m != nil {
				pid, _ := strconv.Atoi(m[1])
				w.faulted[pid] = strings.TrimSpace(line)
			}
		case strings.Contains(line, "pending list"):
			logger.Error(errors.New(strings.TrimSpace(line)), "An MPS client of another user waits for this GPU's server: every container on an MPS GPU must run as mps.clientUID", "clientUID", s.UID)
		}
	}
	listed := map[int]bool{}
	active := 0
	for _, srv := range servers {
		listed[srv.PID] = true
		switch srv.Status {
		case "FAULT":
			if _, seen := w.faulted[srv.PID]; !seen {
				w.faulted[srv.PID] = "status FAULT"
			}
		case "INITIALIZING": // starting: wait for it rather than start another
			if st, err := d.awaitStatus(ctx, srv.PID); err == nil && st == "ACTIVE" && w.faulted[srv.PID] == "" {
				active = srv.PID
			}
		case "ACTIVE":
			if w.faulted[srv.PID] == "" {
				active = srv.PID
			}
		}
	}
	for pid := range w.faulted {
		if !listed[pid] {
			delete(w.faulted, pid) // the faulted server exited
		}
	}
	if len(w.faulted) > 0 {
		pids := make([]int, 0, len(w.faulted))
		for pid := range w.faulted {
			pids = append(pids, pid)
		}
		sort.Ints(pids)
		return fmt.Errorf("%w: GPU %s: server %d: %s (every client of that server has failed; the GPU recovers when its clients exit and a fresh server answers)", ErrFault, d.UUID, pids[0], w.faulted[pids[0]])
	}
	if active != 0 {
		if active != w.pid || ceiling != w.ceiling {
			return s.setCeiling(ctx, d, w, active, ceiling)
		}
		return nil
	}
	pid, err := d.StartServer(ctx, s.UID)
	if err != nil {
		return err
	}
	st, err := d.awaitStatus(ctx, pid)
	if err != nil {
		return err
	}
	if st != "ACTIVE" {
		return fmt.Errorf("%w: GPU %s: fresh server %d is %s", ErrServerStart, d.UUID, pid, st)
	}
	logger.V(2).Info("Started an MPS server", "pid", pid, "uid", s.UID, "activeThreadPercentage", ceiling)
	return s.setCeiling(ctx, d, w, pid, ceiling)
}

// The log lines that mark a fatal fault, and the server they name.
var (
	logFault  = regexp.MustCompile(`(?i)fatal|\bFAULT\b`)
	logServer = regexp.MustCompile(`(?i)server (\d+)`)
)

// readLog returns the lines of control.log written since the last read.
func (s *Supervisor) readLog(d *Daemon, w *watch) []string {
	f, err := os.Open(filepath.Join(d.LogDir(), ControlLog))
	if err != nil {
		return nil
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.Size() < w.offset {
		w.offset = 0 // rotated or truncated
	}
	if _, err := f.Seek(w.offset, io.SeekStart); err != nil {
		return nil
	}
	var lines []string
	r := bufio.NewReader(f)
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			break // a partial last line is read next time
		}
		w.offset += int64(len(line))
		lines = append(lines, line)
	}
	return lines
}

// Retire stops the daemons under root whose GPU is not in keep (it left MPS
// mode) and restores the compute mode the plugin set (modes nil: left alone).
func Retire(ctx context.Context, root string, keep map[string]bool, command string, timeout time.Duration, modes ComputeModes) error {
	entries, err := os.ReadDir(root)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range entries {
		if !e.IsDir() || keep[e.Name()] {
			continue
		}
		d := New(root, e.Name(), command, timeout)
		if err := d.Stop(ctx); err != nil && !errors.Is(err, ErrNoAnswer) {
			errs = append(errs, err)
		}
		if _, err := os.Stat(filepath.Join(d.Dir, computeModeMarker)); err == nil && modes != nil {
			if err := modes.SetExclusive(d.UUID, false); err != nil {
				errs = append(errs, fmt.Errorf("restoring compute mode DEFAULT on GPU %s: %w", d.UUID, err))
				continue
			}
		}
		klog.FromContext(ctx).V(2).Info("GPU left MPS mode: stopped its MPS control daemon", "gpu", d.UUID)
		if err := os.RemoveAll(d.Dir); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
