package runner

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// A backlog is held in its queue while it is created and released with one
// queue update, so that vc-scheduler meets it with its whole cluster in
// cache. Started after the pods were created, it opened its first session
// a second after start with only the nodes it had synced by then (928, 330
// and 415 of 1000 in three CPU-only runs of one invocation, simulated
// cluster), and that session placed nearly the whole trace on them: the
// scheduler's CPU then measured how far its node sync had come.
const backlogQueue = "default"

// heldCapability is the queue capability that holds a backlog: one
// millicore. Volcano's proportion plugin enqueues no PodGroup whose minimum
// resources exceed the queue's capability and allocates no task over it;
// every pod of the benchmark asks more CPU than that. (A capability of 0 is
// no limit to Volcano: 2,563 pods bound through one.)
func heldCapability() corev1.ResourceList {
	return corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1m")}
}

// hold caps the backlog queue at one millicore of CPU and returns what
// releases it: its capability as it was.
func (o Options) hold(ctx context.Context) (release func(context.Context) error, err error) {
	q, err := o.VC.SchedulingV1beta1().Queues().Get(ctx, backlogQueue, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("holding the backlog in queue %s: %w", backlogQueue, err)
	}
	was := q.Spec.Capability
	if err := o.setCapability(ctx, heldCapability()); err != nil {
		return nil, fmt.Errorf("holding the backlog in queue %s: %w", backlogQueue, err)
	}
	return func(ctx context.Context) error {
		if err := o.setCapability(ctx, was); err != nil {
			return fmt.Errorf("releasing the backlog of queue %s (its capability is still one millicore: restore it by hand): %w", backlogQueue, err)
		}
		return nil
	}, nil
}

// setCapability replaces the backlog queue's capability as a whole (a JSON
// patch: a merge patch would keep the held CPU cap beside a restored memory
// capability); none removes it.
func (o Options) setCapability(ctx context.Context, c corev1.ResourceList) error {
	op := map[string]any{"op": "add", "path": "/spec/capability", "value": c}
	if len(c) == 0 {
		op = map[string]any{"op": "remove", "path": "/spec/capability"}
	}
	patch, err := json.Marshal([]any{op})
	if err != nil {
		return err
	}
	_, err = o.VC.SchedulingV1beta1().Queues().Patch(ctx, backlogQueue, types.JSONPatchType, patch, metav1.PatchOptions{})
	return err
}

// awaitSessions waits until vc-scheduler has completed n more sessions than
// it had at from (it has then seen every object created before), or limit.
func awaitSessions(ctx context.Context, port, from, n int, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		got, err := sessions(ctx, port)
		if err == nil && got >= from+n {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("vc-scheduler completed %d of %d sessions in %s after the backlog was created (last error: %v)", got-from, n, limit, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
