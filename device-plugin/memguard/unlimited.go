package memguard

import (
	"context"
	"errors"
	"fmt"
	"io/fs"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
)

// ReasonLimiterBypassed is the reason of the Warning Event on a pod with a
// process that runs on a compute-shared GPU without libvcuda.
const ReasonLimiterBypassed = "GPULimiterBypassed"

// Unlimited is a process on a GPU where its container's compute share is
// enforced by libvcuda, running without libvcuda: nothing holds it to the
// share (its memory is still the guard's).
type Unlimited struct {
	PID uint32
	Tenant
	Killed bool
}

// unlimited finds the processes of compute-shared tenants that run without
// the limiter (Runner.Limited), reports each once (log, Warning Event) and,
// with KillUnlimited, ends them. skip: processes already killed this period.
func (r *Runner) unlimited(ctx context.Context, uuid string, procs []Process, tenants map[string]Tenant, skip map[uint32]bool) []Unlimited {
	logger := klog.FromContext(ctx)
	var out []Unlimited
	for _, pr := range procs {
		key, ok := r.Owners(pr.PID)
		t, known := tenants[key]
		if !ok || !known || !t.Compute || skip[pr.PID] {
			continue
		}
		r.seen[pr.PID] = true // a process reported once is not reported again while it runs
		limited, err := r.Limited(pr.PID)
		if errors.Is(err, fs.ErrNotExist) {
			continue // ended since NVML listed it
		}
		if err != nil {
			if !r.mapsFailing[uuid] {
				logger.Error(err, "Cannot tell whether a GPU process runs with the limiter; retrying every period", "gpu", uuid, "pid", pr.PID, "container", key)
			}
			r.mapsFailing[uuid] = true
			r.countError(uuid, "maps")
			continue
		}
		delete(r.mapsFailing, uuid)
		if limited {
			continue
		}
		u := Unlimited{PID: pr.PID, Tenant: t}
		if r.KillUnlimited {
			u.Killed = r.killUnlimited(ctx, u)
		} else if r.reported[pr.PID] != key {
			r.event(u, unlimitedMessage(u, false))
			logger.Info("A GPU process runs without the limiter: its compute share is not enforced", "pod", klog.KRef(u.Namespace, u.Pod), "container", u.Container,
				"pid", u.PID, "gpu", u.UUID, "cores", u.Cores)
		}
		r.reported[pr.PID] = key
		if r.Metrics != nil && !u.Killed {
			r.Metrics.Unlimited.WithLabelValues(tenantValues(t)...).Inc()
		}
		out = append(out, u)
	}
	return out
}

// killUnlimited ends an unlimited process after checking again that it is
// the container's and still runs without the limiter (its pid may have been
// reused since).
func (r *Runner) killUnlimited(ctx context.Context, u Unlimited) bool {
	logger := klog.FromContext(ctx)
	if limited, err := r.Limited(u.PID); err != nil || limited {
		return false
	}
	if !r.signal(ctx, u.PID, u.Tenant, "a GPU process that runs without the limiter") {
		return false
	}
	r.event(u, unlimitedMessage(u, true))
	logger.Info("Killed a GPU process that ran without the limiter", "pod", klog.KRef(u.Namespace, u.Pod), "container", u.Container,
		"pid", u.PID, "gpu", u.UUID, "cores", u.Cores)
	if r.Metrics != nil {
		r.Metrics.UnlimitedKills.WithLabelValues(tenantValues(u.Tenant)...).Inc()
	}
	return true
}

func (r *Runner) event(u Unlimited, msg string) {
	if r.Recorder == nil {
		return
	}
	ref := &corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: u.Namespace, Name: u.Pod, UID: types.UID(u.PodUID)}
	r.Recorder.Event(ref, corev1.EventTypeWarning, ReasonLimiterBypassed, msg)
}

// unlimitedMessage is the Event's message about u, reported or killed.
func unlimitedMessage(u Unlimited, killed bool) string {
	what := fmt.Sprintf("Process %d (host pid) of container %s runs on GPU %s (index %d) without libvcuda.so, so its compute share (%s) is not enforced "+
		"and it can take GPU time from the GPU's other tenants", u.PID, u.Container, u.UUID, u.Index, shareText(u.Cores))
	action := "The node reports it (memoryGuard.unlimitedProcesses: report; kill ends such processes)"
	if killed {
		what = fmt.Sprintf("Killed process %d (host pid) of container %s: it ran on GPU %s (index %d) without libvcuda.so, so its compute share (%s) was not enforced",
			u.PID, u.Container, u.UUID, u.Index, shareText(u.Cores))
		action = "The node ends such processes (memoryGuard.unlimitedProcesses: kill)"
	}
	return what + ". A statically linked or musl-based program, or one started through a loader of its own, does not load it: " +
		"run the program dynamically linked against glibc. " + action
}

func shareText(cores int) string {
	if cores == 0 {
		return "best effort: what the GPU's shares leave"
	}
	return fmt.Sprintf("%d%% of the GPU", cores)
}
