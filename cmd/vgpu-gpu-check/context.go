package main

import (
	"bufio"
	"context"
	"fmt"
	"os/exec"
	"strings"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// contextMiB runs p without the limiter, holding a CUDA context and one tiny
// allocation, and returns what NVML says its process takes of the GPU: the
// figure limiter.contextMiB wants for this model (the allocator's smallest
// block included, which errs on the safe side). ctx bounds it.
func contextMiB(ctx context.Context, lib nvml.Interface, dev nvml.Device, p *program) (uint64, error) {
	if !has(lib, "nvmlDeviceGetComputeRunningProcesses") {
		return 0, fmt.Errorf("this NVML has no nvmlDeviceGetComputeRunningProcesses: %w", errUnavailable)
	}
	cmd := exec.CommandContext(ctx, p.cmd[0], append(append([]string{}, p.cmd[1:]...), "ctx", "x")...)
	cmd.WaitDelay = 5 * time.Second
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return 0, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return 0, err
	}
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	defer func() { stdin.Close(); _ = cmd.Wait() }()
	ready := false
	for sc := bufio.NewScanner(stdout); sc.Scan(); {
		if strings.Contains(sc.Text(), `"ready"`) {
			ready = true
			break
		}
	}
	if !ready {
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		return 0, fmt.Errorf("%s did not open a context (ctx mode ended without \"ready\")", p.name)
	}
	procs, ret := dev.GetComputeRunningProcesses()
	if ret != nvml.SUCCESS {
		return 0, fmt.Errorf("NVML running processes: %v", ret)
	}
	for _, pr := range procs {
		if int(pr.Pid) == cmd.Process.Pid {
			return pr.UsedGpuMemory >> 20, nil
		}
	}
	return 0, fmt.Errorf("NVML lists no process %d on the GPU (a VM or container hiding host pids?)", cmd.Process.Pid)
}
