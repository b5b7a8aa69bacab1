//go:build e2e

package tests

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// newNamespace creates a namespace for one test and deletes it afterwards.
func newNamespace(t *testing.T, ctx context.Context) string {
	t.Helper()
	name := strings.ToLower(strings.NewReplacer("/", "-", "_", "-").Replace(t.Name()))
	if len(name) > 50 {
		name = name[:50]
	}
	name = fmt.Sprintf("%s-%d", name, time.Now().UnixNano()%100000)
	_, err := shared.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// Every test leaves nothing behind: the next one counts on free GPUs (a
	// gang that needs NVLink pairs settles for PCIe while an earlier test's
	// pods still hold them), so the cleanup waits until the pods are gone.
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		_ = shared.vc.BatchV1alpha1().Jobs(name).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})
		_ = shared.kube.CoreV1().Namespaces().Delete(ctx, name, metav1.DeleteOptions{})
		waitFor(t, ctx, "the pods of namespace "+name+" to be gone", func() error {
			l, err := shared.kube.CoreV1().Pods(name).List(ctx, metav1.ListOptions{})
			if err != nil {
				return err
			}
			if n := len(l.Items); n > 0 {
				return fmt.Errorf("%d pods left, e.g. %s (%s)", n, l.Items[0].Name, l.Items[0].Status.Phase)
			}
			return nil
		})
	})
	return name
}

// waitFor polls check every 200ms until it returns nil or ctx ends.
func waitFor(t *testing.T, ctx context.Context, what string, check func() error) {
	t.Helper()
	var last error
	for {
		if last = check(); last == nil {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v", what, last)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// waitPodsRunning waits until ns has exactly n pods, all bound and Running.
func waitPodsRunning(t *testing.T, ctx context.Context, ns string, n int) []corev1.Pod {
	t.Helper()
	var pods []corev1.Pod
	waitFor(t, ctx, fmt.Sprintf("%d running pods in %s", n, ns), func() error {
		list, err := shared.kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		running := 0
		for _, p := range list.Items {
			if p.Spec.NodeName != "" && p.Status.Phase == corev1.PodRunning {
				running++
			}
		}
		if len(list.Items) != n || running != n {
			return fmt.Errorf("%d pods, %d running", len(list.Items), running)
		}
		pods = list.Items
		return nil
	})
	return pods
}

// httpGet GETs url and returns the status code and the body.
func httpGet(ctx context.Context, url string) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, body, err
}

// schedulerSessions reads how many scheduling sessions vc-scheduler has
// completed (Volcano's e2e latency histogram counts one per session).
func schedulerSessions(ctx context.Context) (int64, error) {
	url := fmt.Sprintf("http://127.0.0.1:%d/metrics", shared.cl.Config.Ports.SchedulerMetrics)
	_, body, err := httpGet(ctx, url)
	if err != nil {
		return 0, err
	}
	const metric = "volcano_e2e_scheduling_latency_milliseconds_count "
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, metric); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return int64(f), err
		}
	}
	return 0, fmt.Errorf("%s: no %s", url, strings.TrimSpace(metric))
}

// waitSchedulerSessions waits until vc-scheduler has completed n more whole
// sessions, so a test that checks something stays pending knows the
// scheduler has looked at it since, instead of sleeping a guessed time.
func waitSchedulerSessions(t *testing.T, ctx context.Context, n int64) {
	t.Helper()
	start, err := schedulerSessions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, fmt.Sprintf("%d more scheduling sessions", n), func() error {
		now, err := schedulerSessions(ctx)
		if err != nil {
			return err
		}
		// A session that was already running when we started counts only
		// after the next one: hence n+1.
		if now < start+n+1 {
			return fmt.Errorf("%d of %d sessions done", now-start, n+1)
		}
		return nil
	})
}
