//go:build e2e

package tests

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
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
	pid, alive := cfg.Pid(name)
	if !alive {
		return pid, fmt.Errorf("%s: pid %d is not a running process of this cluster", name, pid)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		return pid, fmt.Errorf("kill %s (pid %d): %w", name, pid, err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, alive := cfg.Pid(name); !alive {
			return pid, nil
		}
		if time.Now().After(deadline) {
			return pid, fmt.Errorf("%s (pid %d) survived SIGKILL", name, pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// componentPid returns the pid of a component and whether that process
// (same pid and start time as the harness recorded) is alive.
func componentPid(name string) (int, bool) {
	return shared.cl.Config.Pid(name)
}

// restartMissing runs cluster.Up, which starts what is not running and waits
// until the whole cluster is ready again.
func restartMissing(ctx context.Context) error {
	_, err := cluster.Up(ctx, shared.cl.Config)
	return err
}
