//go:build e2e

package tests

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/volcano-vgpu/volcano-vgpu/e2e/cluster"
)

// Control of the local cluster's processes and of Volcano's CLI, for the
// scenario tests.

// vcctl runs Volcano's CLI against the cluster.
func vcctl(t *testing.T, ctx context.Context, args ...string) string {
	t.Helper()
	args = append(args, "--kubeconfig", shared.cl.Config.Kubeconfig())
	cmd := exec.CommandContext(ctx, filepath.Join(shared.cl.Config.BinDir, "vcctl"), args...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("vcctl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// killComponent SIGKILLs one of the harness's processes (a crash, not a
// clean stop) and waits until it is gone. It returns the pid it killed. It
// may run outside the test goroutine: it reports, never fails the test.
func killComponent(name string) (int, error) {
	cfg := shared.cl.Config
	data, err := os.ReadFile(filepath.Join(cfg.StateDir, "pids", name+".pid"))
	if err != nil {
		return 0, fmt.Errorf("%s: %w", name, err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil {
		return 0, fmt.Errorf("%s: pid file: %w", name, err)
	}
	if !processOf(pid, cfg.BinDir) {
		return pid, fmt.Errorf("%s: pid %d is not a running process of this cluster", name, pid)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		return pid, fmt.Errorf("kill %s (pid %d): %w", name, pid, err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for processOf(pid, cfg.BinDir) {
		if time.Now().After(deadline) {
			return pid, fmt.Errorf("%s (pid %d) survived SIGKILL", name, pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return pid, nil
}

// processOf reports whether pid is a live (not zombie) process started from
// binDir.
func processOf(pid int, binDir string) bool {
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	return err == nil && strings.HasPrefix(string(cmdline), binDir)
}

// componentPid returns the pid a component's pid file names.
func componentPid(t *testing.T, name string) int {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(shared.cl.Config.StateDir, "pids", name+".pid"))
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(data)))
	return pid
}

// restartMissing runs cluster.Up, which starts what is not running and waits
// until the whole cluster is ready again.
func restartMissing(ctx context.Context) error {
	_, err := cluster.Up(ctx, shared.cl.Config)
	return err
}
