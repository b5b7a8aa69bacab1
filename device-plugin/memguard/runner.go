package memguard

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// ReasonCapExceeded is the reason of the Warning Event on a pod whose
// process the guard killed.
const ReasonCapExceeded = "GPUMemoryCapExceeded"

// Runner checks every GPU with tenants once a period.
type Runner struct {
	Source Source
	// List returns every container allocated on the node, per GPU.
	List func() []Tenant
	// Owners maps a host pid to its container's key (procmap.Mapper.Owners).
	Owners   func(hostPID uint32) (key string, ok bool)
	Policy   Policy
	Period   time.Duration
	Clock    clock.WithTicker
	Recorder record.EventRecorder
	Metrics  *Metrics
	// Kill ends a process (default: SIGKILL by host pid).
	Kill func(pid uint32) error
	// Limited says whether a host pid runs with libvcuda loaded
	// (procmap.Mapper.Maps); nil: processes without it are not looked for.
	Limited func(pid uint32) (bool, error)
	// KillUnlimited ends a compute-shared container's process that runs
	// without libvcuda; false: it is reported (Event, metric, log).
	KillUnlimited bool

	failing     map[string]bool   // GPUs whose last read failed (logged once until they recover)
	mapsFailing map[string]bool   // GPUs whose last memory-map read failed (logged once)
	reported    map[uint32]string // unlimited processes reported, by pid: their container
	seen        map[uint32]bool   // pids checked this period
}

// Run checks each period until ctx ends.
func (r *Runner) Run(ctx context.Context) error {
	if r.Period <= 0 {
		return fmt.Errorf("memory guard: period %s: expected a positive duration (memoryGuard.period)", r.Period)
	}
	logger := klog.FromContext(ctx).WithName("memguard")
	ctx = klog.NewContext(ctx, logger)
	t := r.Clock.NewTicker(r.Period)
	defer t.Stop()
	logger.V(2).Info("GPU memory guard started", "period", r.Period, "toleranceMiB", r.Policy.ToleranceMiB, "uncountedContextMiB", r.Policy.UncountedContextMiB,
		"unlimitedProcesses", r.Limited != nil, "killUnlimited", r.KillUnlimited)
	for {
		r.Tick(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C():
		}
	}
}

// Tick checks every GPU with tenants once and returns the kills it made.
func (r *Runner) Tick(ctx context.Context) []Kill {
	kills, _ := r.TickAll(ctx)
	return kills
}

// TickAll is Tick that also returns the processes found running without
// the limiter (with Limited set).
func (r *Runner) TickAll(ctx context.Context) ([]Kill, []Unlimited) {
	logger := klog.FromContext(ctx)
	byGPU := map[string]map[string]Tenant{}
	index, model := map[string]int{}, map[string]string{}
	for _, t := range r.List() {
		if byGPU[t.UUID] == nil {
			byGPU[t.UUID] = map[string]Tenant{}
		}
		byGPU[t.UUID][t.Key] = t
		index[t.UUID], model[t.UUID] = t.Index, t.Model
	}
	uuids := make([]string, 0, len(byGPU))
	for u := range byGPU {
		uuids = append(uuids, u)
	}
	slices.Sort(uuids)
	if r.Metrics != nil {
		r.Metrics.Held.Reset()
		r.Metrics.Unowned.Reset()
		r.Metrics.Unlimited.Reset()
	}
	if r.mapsFailing == nil {
		r.mapsFailing, r.reported = map[string]bool{}, map[uint32]string{}
	}
	r.seen = map[uint32]bool{}
	var done []Kill
	var unlimited []Unlimited
	for _, uuid := range uuids {
		procs, err := r.Source.Running(uuid)
		if err != nil {
			if !r.failing[uuid] {
				logger.Error(err, "Cannot check GPU memory held by containers; retrying every period", "gpu", uuid)
			}
			if r.failing == nil {
				r.failing = map[string]bool{}
			}
			r.failing[uuid] = true
			r.countError(uuid, "nvml")
			continue
		}
		if r.failing[uuid] {
			delete(r.failing, uuid)
			logger.Info("GPU memory check works again", "gpu", uuid)
		}
		v := Decide(procs, r.Owners, byGPU[uuid], r.Policy)
		r.record(uuid, index[uuid], model[uuid], v)
		if len(v.Unowned) > 0 {
			logger.V(4).Info("GPU processes in no container allocated on the GPU, left alone", "gpu", uuid, "processes", v.Unowned)
		}
		for _, h := range v.Holdings {
			logger.V(6).Info("GPU memory held", "gpu", uuid, "container", h.Key, "heldMiB", h.HeldBytes/MiB, "limitMiB", h.LimitBytes/MiB, "processes", h.Processes)
		}
		killed := map[uint32]bool{}
		for _, k := range v.Kills {
			if r.kill(ctx, k) {
				done = append(done, k)
				killed[k.PID] = true
			}
		}
		if r.Limited != nil {
			unlimited = append(unlimited, r.unlimited(ctx, uuid, procs, byGPU[uuid], killed)...)
		}
	}
	for pid := range r.reported {
		if !r.seen[pid] {
			delete(r.reported, pid) // ended: a new process of that pid is reported again
		}
	}
	return done, unlimited
}

func (r *Runner) record(uuid string, index int, model string, v Verdict) {
	if r.Metrics == nil {
		return
	}
	for _, h := range v.Holdings {
		r.Metrics.Held.WithLabelValues(tenantValues(h.Tenant)...).Set(float64(h.HeldBytes))
	}
	var unowned uint64
	for _, p := range v.Unowned {
		unowned += p.UsedBytes
	}
	r.Metrics.Unowned.WithLabelValues(uuid, strconv.Itoa(index), model).Set(float64(unowned))
}

func (r *Runner) countError(uuid, what string) {
	if r.Metrics != nil {
		r.Metrics.Errors.WithLabelValues(uuid, what).Inc()
	}
}

// kill ends one process, after checking that its pid still belongs to the
// container (a pid freed since NVML listed it may have been reused).
func (r *Runner) kill(ctx context.Context, k Kill) bool {
	logger := klog.FromContext(ctx)
	if !r.signal(ctx, k.PID, k.Tenant, "a process over its container's GPU memory cap") {
		return false
	}
	msg := fmt.Sprintf("Killed process %d (host pid) of container %s: the container held %d MiB on GPU %s (index %d), over its cap of %d MiB "+
		"(limit %d MiB with its %d processes' contexts and the tolerance); the process held %d MiB",
		k.PID, k.Container, k.HeldBytes/MiB, k.UUID, k.Index, k.CapMiB, k.LimitBytes/MiB, k.Processes, k.ProcessBytes/MiB)
	logger.Info("Killed a process over its container's GPU memory cap", "pod", klog.KRef(k.Namespace, k.Pod), "container", k.Container,
		"pid", k.PID, "gpu", k.UUID, "capMiB", k.CapMiB, "heldMiB", k.HeldBytes/MiB, "limitMiB", k.LimitBytes/MiB, "processMiB", k.ProcessBytes/MiB)
	if r.Recorder != nil {
		ref := &corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: k.Namespace, Name: k.Pod, UID: types.UID(k.PodUID)}
		r.Recorder.Event(ref, corev1.EventTypeWarning, ReasonCapExceeded, msg)
	}
	if r.Metrics != nil {
		r.Metrics.Kills.WithLabelValues(tenantValues(k.Tenant)...).Inc()
	}
	return true
}

// signal SIGKILLs pid (Runner.Kill) if it still runs in t's container; what
// names the process in the log. False: not killed (gone, moved, refused).
func (r *Runner) signal(ctx context.Context, pid uint32, t Tenant, what string) bool {
	logger := klog.FromContext(ctx)
	if key, ok := r.Owners(pid); !ok || key != t.Key {
		logger.V(2).Info("Not killing a process that left its container since NVML listed it", "pid", pid, "container", t.Key)
		return false
	}
	kill := r.Kill
	if kill == nil {
		kill = sigkill
	}
	if err := kill(pid); err != nil {
		if !errors.Is(err, syscall.ESRCH) {
			logger.Error(err, "Cannot kill "+what+" (the device plugin needs hostPID and CAP_KILL)", "pid", pid, "gpu", t.UUID, "container", t.Key)
			r.countError(t.UUID, "kill")
		}
		return false
	}
	return true
}

func sigkill(pid uint32) error { return syscall.Kill(int(pid), syscall.SIGKILL) }
