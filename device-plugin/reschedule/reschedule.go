// Package reschedule hands back to the scheduler the pods that kubelet failed
// at admission because this node's Allocate refused them (opt-in:
// allocate.reschedule). Kubelet marks such a pod Failed with reason
// UnexpectedAdmissionError and never retries it; the pod's GPUs were booked
// for nothing. The plugin posts an Event saying why and deletes the pod (UID
// precondition), so that its controller creates it again and the scheduler
// places it anew: a Volcano Job (while it runs), a ReplicaSet, a Job. A pod
// without a controller is deleted too, and the Event says nothing will
// create it again.
package reschedule

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

const (
	// AdmissionReason is the pod status reason kubelet sets when a device
	// plugin's Allocate failed.
	AdmissionReason = "UnexpectedAdmissionError"
	// EventReason is the reason of the Event posted before the deletion.
	EventReason = "GPUAllocationFailedRescheduled"
	// maxTries bounds the deletions tried for one pod (API errors).
	maxTries = 8
)

// Target is a pod to hand back.
type Target struct {
	Namespace, Name string
	UID             types.UID
}

// Candidate reports whether pod is one kubelet failed at admission on node
// and that asks for resource (so this plugin's Allocate refused it).
func Candidate(pod *corev1.Pod, node string, resource corev1.ResourceName) bool {
	return pod.Spec.NodeName == node && pod.DeletionTimestamp == nil &&
		pod.Status.Phase == corev1.PodFailed && pod.Status.Reason == AdmissionReason && asks(pod, resource)
}

func asks(pod *corev1.Pod, resource corev1.ResourceName) bool {
	for _, cs := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range cs {
			if _, ok := cs[i].Resources.Limits[resource]; ok {
				return true
			}
			if _, ok := cs[i].Resources.Requests[resource]; ok {
				return true
			}
		}
	}
	return false
}

// Message is the Event's text for pod.
func Message(pod *corev1.Pod) string {
	why := pod.Status.Message
	if why == "" {
		why = "no message"
	}
	if owner := metav1.GetControllerOf(pod); owner != nil {
		return fmt.Sprintf("kubelet failed the pod at admission (%s); the GPU device plugin deletes it so that its controller %s %s creates it again and the scheduler places it anew (allocate.reschedule)",
			why, owner.Kind, owner.Name)
	}
	return fmt.Sprintf("kubelet failed the pod at admission (%s); the GPU device plugin deletes it (allocate.reschedule), and as it has no controller nothing will create it again: create it anew",
		why)
}

// Rescheduler deletes the candidates it is shown, one at a time, retrying
// API errors with backoff.
type Rescheduler struct {
	Client   kubernetes.Interface
	Recorder record.EventRecorder
	Node     string
	Resource corev1.ResourceName
	Clock    clock.PassiveClock

	queue workqueue.TypedRateLimitingInterface[Target]
	// pending keeps each queued pod as it was seen (the cache may have
	// dropped it by the time the worker runs).
	pending *pendingSet
}

// New returns a Rescheduler; Run must be started before Observe is useful.
func New(client kubernetes.Interface, recorder record.EventRecorder, node string, resource corev1.ResourceName, clk clock.PassiveClock) *Rescheduler {
	return &Rescheduler{
		Client: client, Recorder: recorder, Node: node, Resource: resource, Clock: clk,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[Target](200*time.Millisecond, 30*time.Second),
			workqueue.TypedRateLimitingQueueConfig[Target]{Name: "reschedule"}),
		pending: newPendingSet(),
	}
}

// Observe queues pod when it is a candidate; it never blocks.
func (r *Rescheduler) Observe(pod *corev1.Pod) {
	if !Candidate(pod, r.Node, r.Resource) {
		return
	}
	t := Target{Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID}
	if r.pending.add(t, pod.DeepCopy(), r.Clock.Now()) {
		r.queue.Add(t)
	}
}

// Run works the queue until ctx ends.
func (r *Rescheduler) Run(ctx context.Context) {
	go func() {
		<-ctx.Done()
		r.queue.ShutDown()
	}()
	for r.next(ctx) {
	}
}

func (r *Rescheduler) next(ctx context.Context) bool {
	t, quit := r.queue.Get()
	if quit {
		return false
	}
	defer r.queue.Done(t)
	logger := klog.FromContext(ctx).WithValues("pod", klog.KRef(t.Namespace, t.Name), "uid", t.UID)
	pod, ok := r.pending.get(t)
	if !ok {
		r.queue.Forget(t)
		return true
	}
	err := r.hand(ctx, pod)
	switch {
	case err == nil:
		logger.V(2).Info("Deleted a pod kubelet failed at admission, for its controller to create again", "reason", pod.Status.Message)
	case r.queue.NumRequeues(t) < maxTries:
		logger.Error(err, "Deleting a pod kubelet failed at admission; trying again")
		r.queue.AddRateLimited(t)
		return true
	default:
		logger.Error(err, "Giving up deleting a pod kubelet failed at admission")
	}
	r.queue.Forget(t)
	r.pending.finish(t, r.Clock.Now())
	return true
}

// hand posts the Event (once) and deletes the pod if it is still the one
// kubelet failed (a pod recreated under the same name is left alone).
func (r *Rescheduler) hand(ctx context.Context, pod *corev1.Pod) error {
	if r.pending.announce(Target{Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID}) {
		r.Recorder.Event(pod, corev1.EventTypeWarning, EventReason, Message(pod))
	}
	uid := pod.UID
	err := r.Client.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil // gone already, or another pod now has the name
	}
	if err != nil {
		return fmt.Errorf("deleting pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	return nil
}

// Recorder posts Events as the device plugin of node; stop flushes and ends it.
func Recorder(ctx context.Context, client kubernetes.Interface, node string) (rec record.EventRecorder, stop func()) {
	b := record.NewBroadcaster(record.WithContext(ctx))
	b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")})
	return b.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "vgpu-device-plugin", Host: node}), b.Shutdown
}
