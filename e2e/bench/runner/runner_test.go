package runner

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
