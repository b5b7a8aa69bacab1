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
// process that is still the binary we started.
func (c Config) running(name string) (int, bool) {
	data, err := os.ReadFile(c.pidFile(name))
	if err != nil {
		return 0, false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil || pid <= 0 {
		return 0, false
	}
	if err := syscall.Kill(pid, 0); err != nil {
		return pid, false
	}
	// A recycled pid belongs to another program: check /proc/<pid>/cmdline.
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err == nil && !strings.HasPrefix(string(cmdline), c.BinDir) {
		return pid, false
	}
	return pid, true
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
	// Reap the child if it dies while we still run, so it does not linger as
	// a zombie that kill(pid, 0) would report alive.
	go func() { _ = cmd.Wait() }()
	if err := os.WriteFile(c.pidFile(p.name), []byte(strconv.Itoa(pid)), 0o644); err != nil {
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
