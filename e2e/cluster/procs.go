package cluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// proc is one process the harness starts.
type proc struct {
	name string
	args []string
	env  []string
}

// pidFile is where the pid of the named process is kept.
func (c Config) pidFile(name string) string { return filepath.Join(c.pidDir(), name+".pid") }

// running returns the pid of the named process if its pid file names a live
// process that is still the one we started: same pid and same start time
// (field 22 of /proc/<pid>/stat, fixed at fork, so it can be read at once
// after Start and a recycled pid never matches). A zombie is not running.
func (c Config) running(name string) (int, bool) {
	data, err := os.ReadFile(c.pidFile(name))
	if err != nil {
		return 0, false
	}
	id, err := parseProcID(string(data))
	if err != nil {
		return 0, false
	}
	st, err := readProcStat(id.pid)
	if err != nil || st.state == 'Z' || st.state == 'X' {
		return id.pid, false
	}
	return id.pid, st.startTime == id.startTime
}

// procID names one process for its whole life: a pid alone is reused by the
// kernel, a pid with its start time (clock ticks after boot) is not.
type procID struct {
	pid       int
	startTime uint64
}

func (p procID) String() string { return fmt.Sprintf("%d %d\n", p.pid, p.startTime) }

// parseProcID reads a pid file: "<pid> <start time>".
func parseProcID(s string) (procID, error) {
	f := strings.Fields(s)
	if len(f) != 2 {
		return procID{}, fmt.Errorf("pid file %q: want \"<pid> <start time>\"", s)
	}
	pid, err := strconv.Atoi(f[0])
	if err != nil || pid <= 0 {
		return procID{}, fmt.Errorf("pid file %q: bad pid", s)
	}
	start, err := strconv.ParseUint(f[1], 10, 64)
	if err != nil {
		return procID{}, fmt.Errorf("pid file %q: bad start time", s)
	}
	return procID{pid: pid, startTime: start}, nil
}

type procStat struct {
	state     byte
	startTime uint64
}

// readProcStat reads state and start time from /proc/<pid>/stat. The
// command name (field 2) may hold spaces and parentheses, so fields are
// counted from the last ')'.
func readProcStat(pid int) (procStat, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return procStat{}, err
	}
	return parseProcStat(string(data))
}

func parseProcStat(s string) (procStat, error) {
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return procStat{}, fmt.Errorf("proc stat %q: no command name", s)
	}
	f := strings.Fields(s[i+1:])
	// f[0] is field 3 (state); start time is field 22.
	if len(f) < 20 || len(f[0]) != 1 {
		return procStat{}, fmt.Errorf("proc stat %q: too few fields", s)
	}
	start, err := strconv.ParseUint(f[19], 10, 64)
	if err != nil {
		return procStat{}, fmt.Errorf("proc stat: start time %q: %w", f[19], err)
	}
	return procStat{state: f[0][0], startTime: start}, nil
}

// outdated reports whether the named process runs an older build of its
// binary than the one now in BinDir (its pid file predates the binary), so
// `make cluster` after a rebuild restarts exactly what changed.
func (c Config) outdated(name, bin string) bool {
	pidInfo, err := os.Stat(c.pidFile(name))
	if err != nil {
		return false
	}
	binInfo, err := os.Stat(bin)
	return err == nil && binInfo.ModTime().After(pidInfo.ModTime())
}

// start launches p detached (own session, output to its log file) and
// records its pid.
func (c Config) start(p proc) (int, error) {
	if err := os.MkdirAll(c.logDir(), 0o755); err != nil {
		return 0, err
	}
	if err := os.MkdirAll(c.pidDir(), 0o755); err != nil {
		return 0, err
	}
	bin := p.args[0]
	if _, err := os.Stat(bin); err != nil {
		return 0, fmt.Errorf("%s: binary %s is missing: run `make build` first", p.name, bin)
	}
	logf, err := os.OpenFile(filepath.Join(c.logDir(), p.name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return 0, err
	}
	defer logf.Close()
	cmd := exec.Command(bin, p.args[1:]...)
	cmd.Dir = c.StateDir
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = append(os.Environ(), p.env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return 0, fmt.Errorf("start %s: %w", p.name, err)
	}
	pid := cmd.Process.Pid
	// The child cannot be reaped before Wait, so its /proc entry exists now
	// (as a zombie at worst) and carries its start time.
	st, statErr := readProcStat(pid)
	// Reap the child if it dies while we still run.
	go func() { _ = cmd.Wait() }()
	if statErr != nil {
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		return 0, fmt.Errorf("start %s: read its start time: %w", p.name, statErr)
	}
	id := procID{pid: pid, startTime: st.startTime}
	if err := writeFileAtomic(c.pidFile(p.name), []byte(id.String())); err != nil {
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		return 0, err
	}
	return pid, nil
}

// stop terminates the named process (SIGTERM, then SIGKILL after grace) and
// removes its pid file. A missing or dead process is not an error.
func (c Config) stop(name string, grace time.Duration) error {
	pid, alive := c.running(name)
	defer os.Remove(c.pidFile(name))
	if !alive {
		return nil
	}
	_ = syscall.Kill(-pid, syscall.SIGTERM) // the whole session
	_ = syscall.Kill(pid, syscall.SIGTERM)
	deadline := time.Now().Add(grace)
	for time.Now().Before(deadline) {
		if _, ok := c.running(name); !ok {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("kill %s (pid %d): %w", name, pid, err)
	}
	return nil
}

// writeFileAtomic replaces path with data so that a reader never sees a
// partly written file.
func writeFileAtomic(path string, data []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// pidNames lists the processes that have pid files.
func (c Config) pidNames() []string {
	entries, _ := os.ReadDir(c.pidDir())
	var names []string
	for _, e := range entries {
		if n, ok := strings.CutSuffix(e.Name(), ".pid"); ok {
			names = append(names, n)
		}
	}
	return names
}

// portFree fails with a clear message when something else listens on port.
func portFree(name string, port int) error {
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return fmt.Errorf("%s: port 127.0.0.1:%d is in use by a process this cluster did not start "+
			"(find it with `ss -ltnp 'sport = :%d'`); stop it, or move the cluster with %s=<base>", name, port, port, EnvPortBase)
	}
	return l.Close()
}

// waitFor polls check until it succeeds, the process dies, or ctx ends, and
// says which with the tail of the process log.
func (c Config) waitFor(ctx context.Context, name string, timeout time.Duration, check func() error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last error
	for {
		if last = check(); last == nil {
			return nil
		}
		if _, alive := c.running(name); !alive {
			return fmt.Errorf("%s exited during start-up: %v\n%s", name, last, c.logTail(name, 15))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s not ready after %s: %v\n%s", name, timeout, last, c.logTail(name, 15))
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// logTail returns the last n lines of a process log, for error messages.
func (c Config) logTail(name string, n int) string {
	path := filepath.Join(c.logDir(), name+".log")
	data, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return fmt.Sprintf("last lines of %s:\n  %s", path, strings.Join(lines, "\n  "))
}
