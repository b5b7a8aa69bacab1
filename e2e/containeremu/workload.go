package containeremu

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// CUresult values the workload reports.
const (
	CUDASuccess            = 0
	CUDAErrorOutOfMemory   = 2
	CUDAErrorInvalidDevice = 101
)

// HoldingMessage is what the workload writes to stderr once it holds
// Workload.HoldMiB.
const HoldingMessage = "workload: holding "

// Workload is one run of vcuda's workload program (flags at the top of
// vcuda/tools/workload.c).
type Workload struct {
	Device      int
	ChunkMiB    int64   // allocation chunk; 0: the program's default (256)
	MaxAllocMiB int64   // stop allocating after this much; 0: until refused
	HoldMiB     int64   // allocated first and held until exit
	Seconds     float64 // launch period; 0: no launches (and no share)
	// UnlinkShared: before any CUDA call, remove libvcuda's shared files
	// (vcuda.region, vcuda.slots) from the container's shared directory, as
	// a tenant can: this process is then booked from zero.
	UnlinkShared bool
}

// Argv is the command line inside the container.
func (w Workload) Argv() []string {
	argv := []string{WorkloadPath, "--device", strconv.Itoa(w.Device), "--seconds", strconv.FormatFloat(w.Seconds, 'f', -1, 64)}
	for _, f := range []struct {
		flag string
		v    int64
	}{{"--chunk-mib", w.ChunkMiB}, {"--max-alloc-mib", w.MaxAllocMiB}, {"--hold-mib", w.HoldMiB}} {
		if f.v > 0 {
			argv = append(argv, f.flag, strconv.FormatInt(f.v, 10))
		}
	}
	if w.UnlinkShared {
		argv = append(argv, "--unlink-shared", "1")
	}
	return argv
}

// Summary is the workload's JSON line: what a CUDA application saw.
type Summary struct {
	OK             bool     `json:"ok"`
	Error          string   `json:"error,omitempty"`
	Devices        []string `json:"devices"` // UUIDs, in device ordinal order
	Device         int      `json:"device"`  // the ordinal the rest is about
	HeldMiB        int64    `json:"held_mib"`
	CUDATotalMiB   int64    `json:"cuda_total_mib"` // cuMemGetInfo
	CUDAFreeMiB    int64    `json:"cuda_free_mib"`
	NVMLTotalMiB   int64    `json:"nvml_total_mib"` // nvmlDeviceGetMemoryInfo
	NVMLUsedMiB    int64    `json:"nvml_used_mib"`
	AllocChunkMiB  int64    `json:"alloc_chunk_mib"`
	AllocatedBytes int64    `json:"allocated_bytes"` // before the first refusal, beyond HeldMiB
	AllocError     int      `json:"alloc_error"`     // the refusal's CUresult
	Launches       int64    `json:"launches"`
	LaunchSeconds  float64  `json:"launch_seconds"`
	HalfLaunches   int64    `json:"half_launches"` // the second half of the launch period alone
	HalfSeconds    float64  `json:"half_seconds"`
	EndCUDAFreeMiB int64    `json:"end_cuda_free_mib"` // views after the launch period
	EndNVMLUsedMiB int64    `json:"end_nvml_used_mib"`
	// UtilShare is the process's busy time on its GPU over the second half of
	// the launch period, from the fake driver's own accounting (0..1).
	UtilShare *float64 `json:"util_share"`
	// KernelNs: one kernel's GPU time on the fake driver at full load
	// (null without it)
	KernelNs *int64 `json:"kernel_ns"`
	// RT: with --slot, whether its launches ran at real-time priority
	// (null without a slot)
	RT *bool `json:"rt"`
}

// AllocatableMiB is how much the workload could hold in all: held plus
// allocated until refused.
func (s Summary) AllocatableMiB() int64 { return s.HeldMiB + s.AllocatedBytes>>20 }

// ParseSummary reads the workload's JSON line (the last line starting with
// '{'); unknown fields are errors, so a changed program is noticed.
func ParseSummary(stdout string) (Summary, error) {
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		line := strings.TrimSpace(lines[i])
		if !strings.HasPrefix(line, "{") {
			continue
		}
		var s Summary
		dec := json.NewDecoder(strings.NewReader(line))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&s); err != nil {
			return Summary{}, fmt.Errorf("workload summary %q: %w", line, err)
		}
		return s, nil
	}
	return Summary{}, fmt.Errorf("no JSON summary in the workload's output %q", stdout)
}

// ErrWorkload: the workload ran but reported a failure.
var ErrWorkload = errors.New("workload failed")

// StartWorkload starts the workload in container c.
func (e *Emulator) StartWorkload(ctx context.Context, c Container, w Workload) (*Process, error) {
	return e.Start(ctx, c, w.Argv()...)
}

// Summary waits for a workload process and parses its summary. A failed
// run returns what it printed in the error.
func (p *Process) Summary() (Summary, error) {
	out, err := p.Wait()
	s, perr := ParseSummary(out.Stdout)
	switch {
	case perr != nil && err != nil:
		return Summary{}, fmt.Errorf("%w (%s mode): %v; stderr: %s", ErrWorkload, p.Mode, err, strings.TrimSpace(out.Stderr))
	case perr != nil:
		return Summary{}, fmt.Errorf("%w (%s mode): %v; stderr: %s", ErrWorkload, p.Mode, perr, strings.TrimSpace(out.Stderr))
	case !s.OK || err != nil:
		return s, fmt.Errorf("%w (%s mode): %s (%v); stderr: %s", ErrWorkload, p.Mode, s.Error, err, strings.TrimSpace(out.Stderr))
	}
	return s, nil
}

// RunWorkload runs the workload in container c and returns its summary.
func (e *Emulator) RunWorkload(ctx context.Context, c Container, w Workload) (Summary, error) {
	p, err := e.StartWorkload(ctx, c, w)
	if err != nil {
		return Summary{}, err
	}
	return p.Summary()
}
