package reschedule

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"
	clocktesting "k8s.io/utils/clock/testing"
)

const (
	node = "gpu-1"
	res  = corev1.ResourceName("volcano.sh/vgpu-number")
)

// podBuilder makes the pods of these tests.
type podBuilder struct{ pod *corev1.Pod }

func failedPod(name string) *podBuilder {
	return &podBuilder{pod: &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID("uid-" + name)},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "main", Resources: corev1.ResourceRequirements{
			Limits: corev1.ResourceList{res: resource.MustParse("1")}}}}},
		Status: corev1.PodStatus{Phase: corev1.PodFailed, Reason: AdmissionReason,
			Message: "Allocate failed due to cannot verify the pod, which is unexpected"},
	}}
}

func (b *podBuilder) phase(p corev1.PodPhase, reason string) *podBuilder {
	b.pod.Status.Phase, b.pod.Status.Reason = p, reason
	return b
}
func (b *podBuilder) on(n string) *podBuilder { b.pod.Spec.NodeName = n; return b }
func (b *podBuilder) noGPU() *podBuilder {
	b.pod.Spec.Containers[0].Resources = corev1.ResourceRequirements{}
	return b
}
func (b *podBuilder) initGPU() *podBuilder {
	b.pod.Spec.InitContainers = []corev1.Container{{Name: "init", Resources: corev1.ResourceRequirements{
		Requests: corev1.ResourceList{res: resource.MustParse("1")}}}}
	b.pod.Spec.Containers[0].Resources = corev1.ResourceRequirements{}
	return b
}
func (b *podBuilder) deleting() *podBuilder {
	now := metav1.Now()
	b.pod.DeletionTimestamp = &now
	return b
}
func (b *podBuilder) ownedBy(kind, name string) *podBuilder {
	yes := true
	b.pod.OwnerReferences = []metav1.OwnerReference{{APIVersion: "batch.volcano.sh/v1alpha1", Kind: kind, Name: name, UID: "owner", Controller: &yes}}
	return b
}
func (b *podBuilder) obj() *corev1.Pod { return b.pod }

func TestCandidate(t *testing.T) {
	for _, c := range []struct {
		name string
		pod  *corev1.Pod
		want bool
	}{
		{"failed at admission, asks vgpu-number", failedPod("a").obj(), true},
		{"an init container asks", failedPod("a").initGPU().obj(), true},
		{"failed for another reason", failedPod("a").phase(corev1.PodFailed, "Evicted").obj(), false},
		{"running", failedPod("a").phase(corev1.PodRunning, "").obj(), false},
		{"on another node", failedPod("a").on("gpu-2").obj(), false},
		{"asks no GPU: another plugin refused it", failedPod("a").noGPU().obj(), false},
		{"already being deleted", failedPod("a").deleting().obj(), false},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := Candidate(c.pod, node, res); got != c.want {
				t.Errorf("Candidate = %t, want %t", got, c.want)
			}
		})
	}
}

func TestMessage(t *testing.T) {
	for _, c := range []struct {
		name string
		pod  *corev1.Pod
		want []string
	}{
		{"Volcano Job pod", failedPod("a").ownedBy("Job", "train").obj(),
			[]string{"cannot verify the pod", "its controller Job train creates it again", "allocate.reschedule"}},
		{"bare pod", failedPod("a").obj(), []string{"cannot verify the pod", "nothing will create it again"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := Message(c.pod)
			for _, w := range c.want {
				if !strings.Contains(got, w) {
					t.Errorf("message %q lacks %q", got, w)
				}
			}
		})
	}
}

// fixture is a Rescheduler on a fake API that honours delete preconditions
// (the fake tracker alone ignores them) and fails the first deletes when told.
type fixture struct {
	client   *fake.Clientset
	recorder *record.FakeRecorder
	r        *Rescheduler
	deletes  int
}

func newFixture(t *testing.T, failFirst int, pods ...*corev1.Pod) *fixture {
	objs := make([]runtime.Object, len(pods))
	for i, p := range pods {
		objs[i] = p
	}
	f := &fixture{client: fake.NewClientset(objs...), recorder: record.NewFakeRecorder(10)}
	f.client.PrependReactor("delete", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		d := a.(k8stesting.DeleteActionImpl)
		f.deletes++
		if f.deletes <= failFirst {
			return true, nil, apierrors.NewInternalError(context.DeadlineExceeded)
		}
		cur, err := f.client.Tracker().Get(schema.GroupVersionResource{Version: "v1", Resource: "pods"}, d.Namespace, d.Name)
		if err != nil {
			return true, nil, err
		}
		if pre := d.DeleteOptions.Preconditions; pre != nil && pre.UID != nil && *pre.UID != cur.(*corev1.Pod).UID {
			return true, nil, apierrors.NewConflict(schema.GroupResource{Resource: "pods"}, d.Name, context.Canceled)
		}
		return false, nil, nil
	})
	f.r = New(f.client, f.recorder, node, res, clocktesting.NewFakePassiveClock(time.Unix(1700000000, 0)))
	return f
}

// drain runs the worker until the queue is empty.
func (f *fixture) drain(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for f.r.queue.Len() > 0 || f.pendingCount() > 0 {
		if ctx.Err() != nil {
			t.Fatal("queue never drained")
		}
		if f.r.queue.Len() == 0 {
			time.Sleep(10 * time.Millisecond) // a rate-limited retry is due later
			continue
		}
		f.r.next(ctx)
	}
}

func (f *fixture) pendingCount() int {
	f.r.pending.mu.Lock()
	defer f.r.pending.mu.Unlock()
	return len(f.r.pending.pods)
}

func (f *fixture) exists(name string) bool {
	_, err := f.client.CoreV1().Pods("ns").Get(context.Background(), name, metav1.GetOptions{})
	return err == nil
}

func (f *fixture) events() []string {
	var out []string
	for {
		select {
		case e := <-f.recorder.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

func TestReschedulerDeletesOnceWithOneEvent(t *testing.T) {
	bad := failedPod("bad").ownedBy("Job", "train").obj()
	fine := failedPod("fine").phase(corev1.PodRunning, "").obj()
	f := newFixture(t, 0, bad, fine)
	f.r.Observe(bad)
	f.r.Observe(bad) // a second informer event for the same pod
	f.r.Observe(fine)
	f.drain(t)
	f.r.Observe(bad) // a late event after the deletion
	f.drain(t)
	if f.exists("bad") || !f.exists("fine") {
		t.Errorf("after the run: bad exists %t (want false), fine exists %t (want true)", f.exists("bad"), f.exists("fine"))
	}
	evs := f.events()
	if len(evs) != 1 || !strings.HasPrefix(evs[0], "Warning "+EventReason+" ") || !strings.Contains(evs[0], "Job train") {
		t.Errorf("events %q: want one Warning %s naming the Job", evs, EventReason)
	}
	if f.deletes != 1 {
		t.Errorf("%d delete calls, want 1", f.deletes)
	}
}

func TestReschedulerRetriesAPIErrors(t *testing.T) {
	bad := failedPod("bad").obj()
	f := newFixture(t, 2, bad)
	f.r.Observe(bad)
	f.drain(t)
	if f.exists("bad") {
		t.Error("pod still exists after two failed deletes and a retry")
	}
	if f.deletes != 3 || len(f.events()) != 1 {
		t.Errorf("%d deletes (want 3), events posted once each", f.deletes)
	}
}

func TestReschedulerLeavesAPodRecreatedUnderTheSameName(t *testing.T) {
	old := failedPod("w").obj()
	recreated := failedPod("w").phase(corev1.PodPending, "").obj()
	recreated.UID = "uid-new"
	f := newFixture(t, 0, recreated)
	f.r.Observe(old) // seen before the controller replaced it
	f.drain(t)
	if !f.exists("w") {
		t.Error("the new pod under the old name was deleted")
	}
}
