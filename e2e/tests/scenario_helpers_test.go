//go:build e2e

package tests

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	batchv1alpha1 "volcano.sh/apis/pkg/apis/batch/v1alpha1"

	"github.com/volcano-vgpu/volcano-vgpu/api"
	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/reschedule"
	"github.com/volcano-vgpu/volcano-vgpu/e2e/kubeletemu"
)

// Helpers shared by the scenario tests (scenarios_*_test.go): objects and
// waits. The invariant checks are in scenario_checks_test.go, the control of
// the cluster's processes and of vcctl in scenario_procs_test.go.

// hostnameKey pins a pod to one node.
const hostnameKey = "kubernetes.io/hostname"

// gpuPod is a bare pod scheduled by Volcano (vc-controller-manager gives it a
// PodGroup of one) with one container asking number GPUs with memMiB and
// cores on each (0: not asked). node, when set, pins it with a nodeSelector.
func gpuPod(ns, name, node string, number, memMiB, cores int64) *corev1.Pod {
	limits := corev1.ResourceList{api.DefaultResourceNumber: *resource.NewQuantity(number, resource.DecimalSI)}
	if memMiB > 0 {
		limits[api.DefaultResourceMemory] = *resource.NewQuantity(memMiB, resource.DecimalSI)
	}
	if cores > 0 {
		limits[api.DefaultResourceCores] = *resource.NewQuantity(cores, resource.DecimalSI)
	}
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: corev1.PodSpec{
			SchedulerName: "volcano",
			RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{
				Name: "main", Image: "busybox",
				Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("128Mi")},
					Limits:   limits,
				},
			}},
		},
	}
	if node != "" {
		p.Spec.NodeSelector = map[string]string{hostnameKey: node}
	}
	return p
}

// pinJob pins every task of a Job to one node.
func pinJob(job *batchv1alpha1.Job, node string) *batchv1alpha1.Job {
	for i := range job.Spec.Tasks {
		job.Spec.Tasks[i].Template.Spec.NodeSelector = map[string]string{hostnameKey: node}
	}
	return job
}

// createJob submits a Volcano Job through the API.
func createJob(t *testing.T, ctx context.Context, job *batchv1alpha1.Job) {
	t.Helper()
	if _, err := shared.vc.BatchV1alpha1().Jobs(job.Namespace).Create(ctx, job, metav1.CreateOptions{}); err != nil {
		t.Fatalf("job %s: %v", job.Name, err)
	}
}

// createPods creates pods with workers concurrent clients and returns how
// long it took. created, when not nil, is called by the creating worker after
// each creation with the number created so far (not in order across workers).
func createPods(ctx context.Context, pods []*corev1.Pod, workers int, created func(n int)) (time.Duration, error) {
	start := time.Now()
	work := make(chan *corev1.Pod)
	var (
		mu    sync.Mutex
		count int
		errs  []error
		wg    sync.WaitGroup
	)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for p := range work {
				var err error
				for attempt := range 5 { // the apiserver may be slow under the burst
					_, err = shared.kube.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{})
					if err == nil || attempt > 0 && apierrors.IsAlreadyExists(err) { // an earlier attempt got through
						err = nil
						break
					}
					time.Sleep(200 * time.Millisecond)
				}
				mu.Lock()
				n := 0
				if err != nil {
					errs = append(errs, fmt.Errorf("pod %s: %w", p.Name, err))
				} else {
					count++
					n = count
				}
				mu.Unlock()
				if n > 0 && created != nil {
					created(n)
				}
			}
		}()
	}
	for _, p := range pods {
		work <- p
	}
	close(work)
	wg.Wait()
	if len(errs) > 0 {
		return time.Since(start), fmt.Errorf("%d pods not created, first: %w", len(errs), errs[0])
	}
	return time.Since(start), nil
}

// runPod creates a pod and waits until it runs with its assignment allocated.
func runPod(t *testing.T, ctx context.Context, p *corev1.Pod) corev1.Pod {
	t.Helper()
	if _, err := shared.kube.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var cur corev1.Pod
	waitFor(t, ctx, p.Name+" running", func() error {
		got, err := shared.kube.CoreV1().Pods(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if got.Spec.NodeName == "" || got.Status.Phase != corev1.PodRunning {
			return fmt.Errorf("phase %s on %q", got.Status.Phase, got.Spec.NodeName)
		}
		cur = *got
		return nil
	})
	checkServed(t, cur, waitAllocated(t, ctx, cur))
	got, err := shared.kube.CoreV1().Pods(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return *got
}

// listPods lists a namespace's pods.
func listPods(t *testing.T, ctx context.Context, ns string) []corev1.Pod {
	t.Helper()
	list, err := shared.kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return list.Items
}

// splitBound returns a namespace's pods that run on a node and those not bound.
func splitBound(pods []corev1.Pod) (running, pending []corev1.Pod) {
	for _, p := range pods {
		switch {
		case p.Spec.NodeName != "" && p.Status.Phase == corev1.PodRunning:
			running = append(running, p)
		case p.Spec.NodeName == "":
			pending = append(pending, p)
		}
	}
	return running, pending
}

// others describes the first few pods that are bound but not running (a
// failed admission, say), so that a wait that times out names them.
func others(pods []corev1.Pod) string {
	var out []string
	n := 0
	for _, p := range pods {
		if p.Spec.NodeName == "" || p.Status.Phase == corev1.PodRunning {
			continue
		}
		if n++; len(out) < 3 {
			out = append(out, fmt.Sprintf("%s on %s: %s %s %.300s", p.Name, p.Spec.NodeName, p.Status.Phase, p.Status.Reason, p.Status.Message))
		}
	}
	if n == 0 {
		return ""
	}
	return fmt.Sprintf(", %d bound and not running (%s)", n, strings.Join(out, "; "))
}

// gone says why n pods of ns are no longer there, when an Event says
// (the device plugin deletes pods kubelet failed at admission).
func gone(ctx context.Context, ns string, n int) string {
	if n <= 0 {
		return ""
	}
	evs, err := shared.kube.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "reason=" + reschedule.EventReason})
	if err != nil || len(evs.Items) == 0 {
		return fmt.Sprintf(", %d deleted", n)
	}
	e := evs.Items[0]
	return fmt.Sprintf(", %d deleted (%d %s Events; %s: %.300s)", n, len(evs.Items), e.Reason, e.InvolvedObject.Name, e.Message)
}

// waitSettled waits until ns has want running pods and the rest (of total)
// unbound, and the counts hold for hold (several scheduling cycles).
func waitSettled(t *testing.T, ctx context.Context, ns string, total, want int, hold time.Duration) (running, pending []corev1.Pod) {
	t.Helper()
	var since time.Time
	waitFor(t, ctx, fmt.Sprintf("%d of %d pods running in %s, steadily", want, total, ns), func() error {
		all := listPods(t, ctx, ns)
		running, pending = splitBound(all)
		if len(running) != want || len(running)+len(pending) != total {
			since = time.Time{}
			return fmt.Errorf("%d running, %d unbound%s%s", len(running), len(pending), others(all), gone(ctx, ns, total-len(all)))
		}
		if since.IsZero() {
			since = time.Now()
		}
		if time.Since(since) < hold {
			return fmt.Errorf("holding for %s", hold)
		}
		return nil
	})
	return running, pending
}

// unschedulableMessage is the pod's PodScheduled=False message, if any.
func unschedulableMessage(p corev1.Pod) string {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse {
			return c.Message
		}
	}
	return ""
}

// waitUnschedulable waits until the named pod carries a PodScheduled=False
// condition whose message contains one of anyOf, and returns the message.
func waitUnschedulable(t *testing.T, ctx context.Context, ns, name string, anyOf ...string) string {
	t.Helper()
	var msg string
	waitFor(t, ctx, "an unschedulable reason on "+name, func() error {
		p, err := shared.kube.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if p.Spec.NodeName != "" {
			t.Fatalf("%s was bound to %s; it should not fit", name, p.Spec.NodeName)
		}
		msg = unschedulableMessage(*p)
		for _, w := range anyOf {
			if strings.Contains(msg, w) {
				return nil
			}
		}
		return fmt.Errorf("message %q names none of %q", msg, anyOf)
	})
	return msg
}

// waitJobPod waits for the first pod of a Job and returns its name.
func waitJobPod(t *testing.T, ctx context.Context, ns, job string) string {
	t.Helper()
	var name string
	waitFor(t, ctx, "a pod of job "+job, func() error {
		for _, p := range listPods(t, ctx, ns) {
			if strings.HasPrefix(p.Name, job+"-") {
				name = p.Name
				return nil
			}
		}
		return fmt.Errorf("not created yet")
	})
	return name
}

// jobPods returns the live (not terminal) pods of a Job, by name.
func jobPods(t *testing.T, ctx context.Context, ns, job string) []corev1.Pod {
	t.Helper()
	var out []corev1.Pod
	for _, p := range listPods(t, ctx, ns) {
		if strings.HasPrefix(p.Name, job+"-") && !podDone(p) && p.DeletionTimestamp == nil {
			out = append(out, p)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// waitJobRunning waits until a Job has n live pods, all bound, Running and
// served by the device plugin, and returns them.
func waitJobRunning(t *testing.T, ctx context.Context, ns, job string, n int) []corev1.Pod {
	t.Helper()
	var pods []corev1.Pod
	waitFor(t, ctx, fmt.Sprintf("%d running pods of job %s", n, job), func() error {
		pods = jobPods(t, ctx, ns, job)
		running, _ := splitBound(pods)
		if len(pods) != n || len(running) != n {
			return fmt.Errorf("%d pods, %d running", len(pods), len(running))
		}
		return nil
	})
	for _, p := range pods {
		checkServed(t, p, waitAllocated(t, ctx, p))
	}
	return pods
}

// waitJobPhase waits for a Job's phase.
func waitJobPhase(t *testing.T, ctx context.Context, ns, job string, phase batchv1alpha1.JobPhase) {
	t.Helper()
	waitFor(t, ctx, fmt.Sprintf("job %s %s", job, phase), func() error {
		j, err := shared.vc.BatchV1alpha1().Jobs(ns).Get(ctx, job, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if j.Status.State.Phase != phase {
			return fmt.Errorf("phase %s", j.Status.State.Phase)
		}
		return nil
	})
}

// waitAllAllocated waits until the kubelet emulator admitted every pod (the
// device plugin served all its containers); on timeout it reports every pod
// still stuck with what its record says. It returns the records by pod name.
func waitAllAllocated(t *testing.T, ctx context.Context, pods []corev1.Pod) map[string]kubeletemu.Record {
	t.Helper()
	recs := map[string]kubeletemu.Record{}
	var stuck []string
	for {
		stuck = stuck[:0]
		for _, p := range pods {
			if _, ok := recs[p.Name]; ok {
				continue
			}
			cur, err := shared.kube.CoreV1().Pods(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
			if err != nil {
				stuck = append(stuck, fmt.Sprintf("%s: %v", p.Name, err))
				continue
			}
			gpus := gpusOf(t, *cur)
			rec, err := kubeletemu.ReadRecord(shared.cl.Config.SocketDir, cur.Spec.NodeName, string(cur.UID))
			switch {
			case err != nil:
				stuck = append(stuck, fmt.Sprintf("%s on %s: assigned %v, no kubelet record", p.Name, cur.Spec.NodeName, gpus))
			case !rec.Admitted:
				stuck = append(stuck, fmt.Sprintf("%s on %s: assigned %v, rejected: %s", p.Name, cur.Spec.NodeName, gpus, rec.Error))
			default:
				recs[p.Name] = rec
			}
		}
		if len(stuck) == 0 {
			return recs
		}
		select {
		case <-ctx.Done():
			sort.Strings(stuck)
			t.Fatalf("%d of %d pods never allocated:\n  %s", len(stuck), len(pods), strings.Join(stuck, "\n  "))
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// waitNodeFree waits until no live pod bound to any of the nodes asks for
// GPUs (in the API) and each node's device plugin has released everything it
// served, so a test that needs a node's exact capacity can start. Namespace
// deletion of earlier tests frees GPUs asynchronously.
func waitNodeFree(t *testing.T, ctx context.Context, nodes ...string) {
	t.Helper()
	start := time.Now()
	defer func() {
		if d := time.Since(start); d > 5*time.Second {
			t.Logf("waited %s for earlier tests to free %s", d.Round(100*time.Millisecond), strings.Join(nodes, ","))
		}
	}()
	waitFor(t, ctx, "GPUs of "+strings.Join(nodes, ",")+" free", func() error {
		for _, node := range nodes {
			list, err := shared.kube.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
			if err != nil {
				return err
			}
			for _, p := range list.Items {
				if !podDone(p) && asksGPU(p) {
					return fmt.Errorf("%s: pod %s/%s still holds GPUs", node, p.Namespace, p.Name)
				}
			}
			m, err := pluginMetrics(ctx, node)
			if err != nil {
				return err
			}
			for uuid, g := range m {
				if g.Shares != 0 {
					return fmt.Errorf("%s: device plugin still serves %v containers on %s", node, g.Shares, uuid)
				}
			}
		}
		return nil
	})
}

// waitNoOtherPodGroups waits until the only PodGroups left in the cluster are
// in the given namespaces (the queue scenarios need Volcano's proportion
// plugin to see their queues alone).
func waitNoOtherPodGroups(t *testing.T, ctx context.Context, namespaces ...string) {
	t.Helper()
	waitFor(t, ctx, "PodGroups of earlier tests gone", func() error {
		pgs, err := shared.vc.SchedulingV1beta1().PodGroups("").List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		for _, pg := range pgs.Items {
			if !slices.Contains(namespaces, pg.Namespace) {
				return fmt.Errorf("PodGroup %s/%s (queue %s) still exists", pg.Namespace, pg.Name, pg.Spec.Queue)
			}
		}
		return nil
	})
}

// asksGPU reports whether any container of the pod asks vgpu-number.
func asksGPU(p corev1.Pod) bool {
	for _, c := range append(slices.Clone(p.Spec.InitContainers), p.Spec.Containers...) {
		if q, ok := c.Resources.Limits[api.DefaultResourceNumber]; ok && q.Value() > 0 {
			return true
		}
	}
	return false
}

// podDone reports whether the pod has finished (its GPUs are free).
func podDone(p corev1.Pod) bool {
	return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
}

// nodeNames lists the simulated nodes.
func nodeNames() []string {
	out := make([]string, len(shared.cl.Nodes))
	for i, n := range shared.cl.Nodes {
		out[i] = n.Name
	}
	return out
}
