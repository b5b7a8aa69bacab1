package runner

import (
	"context"
	"errors"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
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

func TestCleanupDeletesEveryBenchPodOrStopsWhenNoneGoes(t *testing.T) {
	pod := func(ns, name string, bench bool) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
		if bench {
			p.Labels = map[string]string{LabelJob: "j"}
		}
		return p
	}
	seed := func() *fake.Clientset {
		return fake.NewClientset(pod("bench-a", "p1", true), pod("bench-a", "p2", true), pod("bench-b", "p3", true), pod("other", "keep", false))
	}
	tests := []struct {
		name     string
		noDelete bool // delete-collection answers but deletes nothing
		wantErr  string
		wantLeft []string
	}{
		{name: "every benchmark pod in every namespace goes, others stay", wantLeft: []string{"other/keep"}},
		{name: "no pod deleted for the stall: an error naming what is left", noDelete: true, wantErr: "3 pods left, none deleted", wantLeft: []string{"bench-a/p1", "bench-a/p2", "bench-b/p3", "other/keep"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			kube := seed()
			var collections atomic.Int64
			kube.PrependReactor("delete-collection", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
				collections.Add(1)
				if tc.noDelete {
					return true, nil, nil
				}
				dc := a.(k8stesting.DeleteCollectionAction)
				sel := dc.GetListRestrictions().Labels
				l, err := kube.Tracker().List(corev1.SchemeGroupVersion.WithResource("pods"), corev1.SchemeGroupVersion.WithKind("Pod"), a.GetNamespace())
				if err != nil {
					return true, nil, err
				}
				for _, p := range l.(*corev1.PodList).Items {
					if sel.Matches(labels.Set(p.Labels)) {
						if err := kube.Tracker().Delete(corev1.SchemeGroupVersion.WithResource("pods"), p.Namespace, p.Name); err != nil {
							return true, nil, err
						}
					}
				}
				return true, nil, nil
			})
			o := Options{Kube: kube, CleanupStall: 1500 * time.Millisecond}
			err := o.cleanup(context.Background())
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("cleanup: %v, want error %q", err, tc.wantErr)
			}
			l, _ := kube.CoreV1().Pods("").List(context.Background(), metav1.ListOptions{})
			var left []string
			for _, p := range l.Items {
				left = append(left, p.Namespace+"/"+p.Name)
			}
			sort.Strings(left)
			if d := cmp.Diff(tc.wantLeft, left); d != "" {
				t.Errorf("pods left (-want +got):\n%s", d)
			}
			if tc.wantErr == "" && collections.Load() != 2 {
				t.Errorf("%d delete-collection calls, want one per namespace (2)", collections.Load())
			}
		})
	}
}
