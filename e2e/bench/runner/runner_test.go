package runner

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

func TestParallelRunsAllOrStopsAtAnError(t *testing.T) {
	var n atomic.Int64
	fs := make([]func(context.Context) error, 100)
	for i := range fs {
		fs[i] = func(context.Context) error { n.Add(1); return nil }
	}
	if err := parallel(context.Background(), 8, fs); err != nil || n.Load() != 100 {
		t.Fatalf("err %v, ran %d of 100", err, n.Load())
	}
	boom := errors.New("boom")
	fs[3] = func(context.Context) error { return boom }
	if err := parallel(context.Background(), 1, fs); !errors.Is(err, boom) {
		t.Errorf("err = %v, want boom", err)
	}
}

func TestBindLogCountsEachPodOnce(t *testing.T) {
	b := newBindLog()
	pod := func(name, node string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PodSpec{NodeName: node}}
	}
	b.see(pod("a", ""))
	b.see(pod("a", "n1"))
	first := b.last()
	b.see(pod("a", "n1")) // a later update of a bound pod is not a new bind
	b.see(pod("b", "n2"))
	if b.count() != 2 || first.IsZero() {
		t.Errorf("count %d, first bind %v", b.count(), first)
	}
}

func TestWaitBoundStopsOnStallOnlyAfterTheFirstBind(t *testing.T) {
	o := Options{Timeout: 300 * time.Millisecond, Stall: 50 * time.Millisecond}
	start := time.Now()
	if last := o.waitBound(context.Background(), newBindLog(), 1, start); !last.IsZero() || time.Since(start) < 300*time.Millisecond {
		t.Errorf("no bind: returned after %v, want the full timeout", time.Since(start))
	}
	b := newBindLog()
	b.see(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "a"}, Spec: corev1.PodSpec{NodeName: "n"}})
	start = time.Now()
	if last := o.waitBound(context.Background(), b, 2, start); last.IsZero() || time.Since(start) > 250*time.Millisecond {
		t.Errorf("one bind then nothing: returned after %v, want the stall", time.Since(start))
	}
}

func TestRetryTransient(t *testing.T) {
	busy := apierrors.NewTimeoutError("request did not complete within requested timeout", 0)
	exists := apierrors.NewAlreadyExists(schema.GroupResource{Resource: "pods"}, "p")
	forbidden := apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "p", errors.New("quota"))
	tests := []struct {
		name      string
		errs      []error // one per call; nil succeeds
		wantErr   bool
		wantCalls int
	}{
		{name: "success at once", errs: []error{nil}, wantCalls: 1},
		{name: "a timeout is retried", errs: []error{busy, nil}, wantCalls: 2},
		{name: "a timed-out create that landed counts as created", errs: []error{busy, exists}, wantCalls: 2},
		{name: "already exists on the first call is an error", errs: []error{exists}, wantErr: true, wantCalls: 1},
		{name: "a refusal is not retried", errs: []error{forbidden}, wantErr: true, wantCalls: 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			calls := 0
			err := retryTransient(t.Context(), func() error {
				calls++
				return tc.errs[calls-1]
			})
			if (err != nil) != tc.wantErr || calls != tc.wantCalls {
				t.Errorf("err = %v after %d calls; want error %t after %d", err, calls, tc.wantErr, tc.wantCalls)
			}
		})
	}
}
