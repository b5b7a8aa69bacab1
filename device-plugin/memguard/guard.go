// Package memguard is the node's check of GPU memory caps: per GPU, it reads
// what each process really holds (NVML running processes, keyed by host
// pids), maps each process to its container (package procmap) and kills the
// largest holders of a container that holds more than its cap, as the
// kernel's OOM killer would. libvcuda enforces the cap fast and inside the
// process; a tenant that got around it (removed or rewrote its accounting
// files, called the driver directly) is caught here within one period.
// It also finds processes that run without libvcuda on a GPU whose compute
// shares libvcuda enforces (their memory maps), and reports or ends them.
//
// Decide is pure; Runner reads NVML, signals, records Events and metrics.
package memguard

import (
	"cmp"
	"slices"
)

// MiB is a mebibyte in bytes.
const MiB = 1 << 20

// Tenant is one container's allocation on one GPU.
type Tenant struct {
	Key                       string // podUID/container (compute.Tenant.Key)
	PodUID                    string
	Namespace, Pod, Container string
	UUID                      string // the GPU
	Index                     int    // the GPU's index on the node (metrics)
	Model                     string // the GPU's model, as NVML names it (metrics)
	CapMiB                    int64  // its memory limit on the GPU
	ContextMiB                uint32 // what libvcuda books per process for a context (limiter.contextMiB)
	// Compute: libvcuda holds the container to a compute share on this GPU
	// (time-sliced, a share under 100, a policy other than none), so a
	// process without it takes more than its share (Runner.Limited).
	Compute bool
	Cores   int // the share in percent; 0: best effort
}

// Process is one process NVML lists on a GPU.
type Process struct {
	PID       uint32 // host pid
	UsedBytes uint64
}

// Policy is how much more than its cap a container may hold.
type Policy struct {
	// ToleranceMiB per container and GPU: driver rounding, what a context
	// grows by after it is booked.
	ToleranceMiB int64
	// UncountedContextMiB per process, on a GPU whose context size is not
	// booked by libvcuda (contextMiB 0): the context a real driver creates
	// takes device memory the cap does not include.
	UncountedContextMiB int64
}

// LimitBytes is what a tenant may hold with n processes: its cap, each
// process's context (as libvcuda books it, or the uncounted allowance), and
// the tolerance.
func (p Policy) LimitBytes(t Tenant, n int) uint64 {
	per := int64(t.ContextMiB)
	if per == 0 {
		per = p.UncountedContextMiB
	}
	return uint64(max(t.CapMiB+int64(n)*per+p.ToleranceMiB, 0)) * MiB
}

// Holding is what one tenant holds on the GPU.
type Holding struct {
	Tenant
	HeldBytes  uint64
	Processes  int
	LimitBytes uint64
}

// Kill is a process to end: its container held HeldBytes over LimitBytes.
type Kill struct {
	PID          uint32
	ProcessBytes uint64 // what the process held
	Holding             // its container before the kill
}

// Verdict is the decision for one GPU.
type Verdict struct {
	Holdings []Holding // by key
	Kills    []Kill    // in kill order
	Unowned  []Process // processes in no tenant of this GPU: left alone
}

// Decide compares what each tenant's processes hold on one GPU with its
// limit. A tenant over its limit loses its largest holders, one at a time,
// until what is left fits the limit for the processes left. owner maps a
// host pid to a tenant key; tenants are this GPU's, by key.
func Decide(procs []Process, owner func(pid uint32) (string, bool), tenants map[string]Tenant, p Policy) Verdict {
	var v Verdict
	by := map[string][]Process{}
	for _, pr := range procs {
		key, ok := owner(pr.PID)
		if _, known := tenants[key]; !ok || !known {
			v.Unowned = append(v.Unowned, pr)
			continue
		}
		by[key] = append(by[key], pr)
	}
	keys := make([]string, 0, len(by))
	for k := range by {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		t, ps := tenants[k], by[k]
		h := Holding{Tenant: t, Processes: len(ps)}
		for _, pr := range ps {
			h.HeldBytes += pr.UsedBytes
		}
		h.LimitBytes = p.LimitBytes(t, h.Processes)
		v.Holdings = append(v.Holdings, h)
		// Largest first; equal holders: the newer pid (usually the later process).
		slices.SortFunc(ps, func(a, b Process) int {
			return cmp.Or(cmp.Compare(b.UsedBytes, a.UsedBytes), cmp.Compare(b.PID, a.PID))
		})
		cur := h
		for _, pr := range ps {
			if cur.HeldBytes <= cur.LimitBytes {
				break
			}
			v.Kills = append(v.Kills, Kill{PID: pr.PID, ProcessBytes: pr.UsedBytes, Holding: cur})
			cur.HeldBytes -= pr.UsedBytes
			cur.Processes--
			cur.LimitBytes = p.LimitBytes(t, cur.Processes)
		}
	}
	return v
}
