//go:build e2e

package tests

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	schedulingv1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	"github.com/volcano-vgpu/volcano-vgpu/api"
)

// holdGate keeps a pod from being scheduled until the test lifts it.
const holdGate = "volcano-vgpu.io/scenario-hold"

// newQueue creates an open Volcano Queue for the jobs of namespace ns; it is
// deleted after the test, once those jobs' PodGroups are gone.
func newQueue(t *testing.T, ctx context.Context, ns, name string, weight int32, capability corev1.ResourceList) {
	t.Helper()
	q := &schedulingv1beta1.Queue{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       schedulingv1beta1.QueueSpec{Weight: weight, Capability: capability},
	}
	if _, err := shared.vc.SchedulingV1beta1().Queues().Create(ctx, q, metav1.CreateOptions{}); err != nil {
		t.Fatalf("queue %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = shared.vc.BatchV1alpha1().Jobs(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})
		for ctx.Err() == nil {
			pgs, err := shared.vc.SchedulingV1beta1().PodGroups(ns).List(ctx, metav1.ListOptions{})
			if err == nil && len(pgs.Items) == 0 {
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
		_ = shared.vc.SchedulingV1beta1().Queues().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	waitFor(t, ctx, "queue "+name+" open", func() error {
		q, err := shared.vc.SchedulingV1beta1().Queues().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if q.Status.State != schedulingv1beta1.QueueStateOpen {
			return fmt.Errorf("state %q", q.Status.State)
		}
		return nil
	})
}

// queueName is a cluster-unique queue name for this test's namespace.
func queueName(ns, suffix string) string {
	name := ns + "-" + suffix
	if len(name) > 63 {
		name = name[len(name)-63:]
	}
	return strings.TrimLeft(name, "-")
}

// vgpuMemoryOf sums the vgpu-memory limits of pods (MiB).
func vgpuMemoryOf(pods []corev1.Pod) int64 {
	var sum int64
	for _, p := range pods {
		for _, c := range p.Spec.Containers {
			q := c.Resources.Limits[api.DefaultResourceMemory]
			sum += q.Value()
		}
	}
	return sum
}

// TestScenarioQueueWeights: two queues with weights 1 and 3 both ask more
// vGPU memory than the whole cluster has; Volcano's proportion plugin, fed
// the vgpu-memory the device plugins advertise, splits it about 1:3.
//
// Cluster vgpu-memory: 2×8×81920 + 2×8×40960 + 2×4×23034 = 2150352 MiB.
// Tasks of 20480 MiB fit 4 per A100-80GB, 2 per A100-40GB and 1 per L4: 104
// slots. Deserved: 1/4 → 537588 MiB = 26 tasks; 3/4 → 1612764 MiB = 78
// tasks; 26+78 = 104, so the split is not bent by what fits where.
// Every pod is created behind a scheduling gate and the gates are lifted
// only when both queues' demand is known, so no queue gets a head start (the
// configuration has no reclaim action to take GPUs back).
func TestScenarioQueueWeights(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ns := newNamespace(t, ctx)
	light, heavy := twoQueues(t, ctx, ns, "w1", 1, "w3", 3)
	start := competeGated(t, ctx, ns, gatedJob{"light", light, 40, 1}, gatedJob{"heavy", heavy, 100, 1})
	l, h, since := settledSplit(t, ctx, ns, "light-")
	lightMiB, heavyMiB, nLight, nHeavy := vgpuMemoryOf(l), vgpuMemoryOf(h), len(l), len(h)
	settled := since.Sub(start)
	ratio := float64(heavyMiB) / float64(lightMiB)
	t.Logf("queue weights 1:3 → vgpu-memory %d MiB (%d tasks) : %d MiB (%d tasks) = 1:%.2f, settled %s after the gates lifted",
		lightMiB, nLight, heavyMiB, nHeavy, ratio, settled.Round(100*time.Millisecond))
	if lightMiB == 0 || ratio < 3*0.75 || ratio > 3*1.25 {
		t.Errorf("vgpu-memory split 1:%.2f between queues of weight 1 and 3, want 1:3 ± 25%%", ratio)
	}
	if nLight+nHeavy < 100 {
		t.Errorf("only %d of 104 slots used while both queues still wait", nLight+nHeavy)
	}
	checkNoDoubleBooking(t, ctx)
}

// ungate lifts the hold gate of pods, a few at a time in parallel.
func ungate(t *testing.T, ctx context.Context, ns string, pods []corev1.Pod) {
	t.Helper()
	patch := []byte(`[{"op":"remove","path":"/spec/schedulingGates"}]`)
	work := make(chan string)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for name := range work {
				if _, err := shared.kube.CoreV1().Pods(ns).Patch(ctx, name, types.JSONPatchType, patch, metav1.PatchOptions{}); err != nil {
					mu.Lock()
					errs = append(errs, fmt.Errorf("%s: %w", name, err))
					mu.Unlock()
				}
			}
		}()
	}
	for _, p := range pods {
		work <- p.Name
	}
	close(work)
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("lifting scheduling gates: %d failed, first: %v", len(errs), errs[0])
	}
}

// TestScenarioQueueCapability: a queue capped at 40960 MiB of vgpu-memory
// runs two 20480-MiB tasks of a four-task Job and keeps the other two
// waiting, though the cluster has room.
func TestScenarioQueueCapability(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ns := newNamespace(t, ctx)
	capped := cappedQueue(t, ctx, ns, "cap", 40960)
	job := gpuJob(ns, "capped", 4, 1, 20480, 0, nil)
	job.Spec.Queue, job.Spec.MinAvailable = capped, 1
	createJob(t, ctx, job)
	running, pending := waitSettled(t, ctx, ns, 4, 2, 3*time.Second)
	if got := vgpuMemoryOf(running); got > 40960 {
		t.Errorf("queue capped at 40960 MiB runs %d MiB", got)
	}
	for _, p := range running {
		checkServed(t, p, waitAllocated(t, ctx, p))
	}
	for _, p := range pending {
		if p.Annotations[api.AssignmentKey] != "" {
			t.Errorf("waiting %s carries an assignment", p.Name)
		}
	}
	p, err := shared.kube.CoreV1().Pods(ns).Get(ctx, pending[0].Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("task over the queue's capability: %q", unschedulableMessage(*p))
}

// TestScenarioQueueCountsTotals: the admission webhook rewrites vGPU requests
// to totals, so a queue capped at 16384 MiB of vgpu-memory admits one task
// of 2 GPUs × 8192 MiB (16384 MiB in all) and keeps a further 4096-MiB task
// waiting; counted per GPU (8192) the second would have fitted.
func TestScenarioQueueCountsTotals(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ns := newNamespace(t, ctx)
	capped := cappedQueue(t, ctx, ns, "tot", 16384)
	pair := gpuJob(ns, "pair", 1, 2, 8192, 0, nil)
	pair.Spec.Queue = capped
	createJob(t, ctx, pair)
	running := waitPodsRunning(t, ctx, ns, 1)
	p := running[0]
	if q := p.Spec.Containers[0].Resources.Limits[api.DefaultResourceMemory]; q.Value() != 16384 {
		t.Errorf("admitted 2 × 8192 MiB pod carries vgpu-memory %s, want the total 16384", q.String())
	}
	reqs, err := api.DecodeRequests(p.Annotations[api.RequestsKey])
	if err != nil {
		t.Fatalf("%s: %v", api.RequestsKey, err)
	}
	if c := reqs.Containers[0]; c.Number != 2 || c.MemoryMiB != 8192 {
		t.Errorf("recorded per-GPU ask %+v, want 2 × 8192 MiB", c)
	}
	for _, d := range podAssignment(t, p).Containers[0].Devices {
		if d.MemoryMiB != 8192 {
			t.Errorf("GPU %s holds %d MiB, want 8192 per GPU", d.UUID, d.MemoryMiB)
		}
	}

	more := gpuJob(ns, "more", 1, 1, 4096, 0, nil)
	more.Spec.Queue = capped
	createJob(t, ctx, more)
	name := waitJobPod(t, ctx, ns, "more")
	waitSchedulerSessions(t, ctx, 3)
	w, err := shared.kube.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if w.Spec.NodeName != "" {
		t.Fatalf("%s ran on %s although its queue's 16384 MiB are taken by the 2-GPU task", name, w.Spec.NodeName)
	}
	t.Logf("4096 MiB task beside a 2 × 8192 MiB task in a 16384 MiB queue: waiting (%q)", unschedulableMessage(*w))
}

// TestScenarioMalformedRequestRefusedAtCreation: the admission webhook
// refuses a pod whose vGPU request is malformed, saying what to fix, instead
// of leaving it Pending.
func TestScenarioMalformedRequestRefusedAtCreation(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ns := newNamespace(t, ctx)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "bad", Namespace: ns},
		Spec: corev1.PodSpec{SchedulerName: "volcano", Containers: []corev1.Container{{Name: "main", Image: "busybox",
			Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{
				api.DefaultResourceNumber: resource.MustParse("1"), api.DefaultResourceCores: resource.MustParse("150")}}}}},
	}
	_, err := shared.kube.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
	if err == nil || !strings.Contains(err.Error(), "volcano.sh/vgpu-cores=150, expected 0 to 100") {
		t.Fatalf("creating a pod asking 150 cores per GPU: err = %v, want the webhook's refusal", err)
	}
	t.Logf("refused: %v", err)
}

// TestScenarioQueueSharesByTotals: two queues of equal weight both ask more
// than the cluster has, one with 2-GPU tasks and one with 1-GPU tasks of the
// same per-GPU size (20480 MiB). Counted by totals (the admission webhook),
// proportion splits vgpu-memory about 1:1, so the 2-GPU queue runs about
// half as many tasks; counted per GPU it would get about twice the memory.
// Cluster: 104 slots of 20480 MiB (see TestScenarioQueueWeights).
func TestScenarioQueueSharesByTotals(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ns := newNamespace(t, ctx)
	pairsQ, singlesQ := twoQueues(t, ctx, ns, "pairs", 1, "singles", 1)
	competeGated(t, ctx, ns, gatedJob{"pairs", pairsQ, 60, 2}, gatedJob{"singles", singlesQ, 110, 1})
	pr, sg, _ := settledSplit(t, ctx, ns, "pairs-")
	pairsMiB, singlesMiB, nPairs, nSingles := vgpuMemoryOf(pr), vgpuMemoryOf(sg), len(pr), len(sg)
	ratio := float64(pairsMiB) / float64(singlesMiB)
	t.Logf("equal weights, 2-GPU vs 1-GPU tasks of 20480 MiB per GPU → vgpu-memory %d MiB (%d tasks) : %d MiB (%d tasks) = %.2f:1",
		pairsMiB, nPairs, singlesMiB, nSingles, ratio)
	if pairsMiB != int64(nPairs)*2*20480 {
		t.Errorf("%d running 2-GPU tasks carry %d MiB of vgpu-memory, want the totals %d", nPairs, pairsMiB, int64(nPairs)*2*20480)
	}
	if singlesMiB == 0 || ratio < 0.8 || ratio > 1.25 {
		t.Errorf("vgpu-memory split %.2f:1 between queues of equal weight, want 1:1 ± 20%% (by totals)", ratio)
	}
	checkNoDoubleBooking(t, ctx)
}

// twoQueues creates queues named after ns with the suffixes and weights, on
// an idle cluster (no other test's pods or PodGroups).
func twoQueues(t *testing.T, ctx context.Context, ns, a string, wa int32, b string, wb int32) (string, string) {
	t.Helper()
	qa, qb := queueName(ns, a), queueName(ns, b)
	newQueue(t, ctx, ns, qa, wa, nil)
	newQueue(t, ctx, ns, qb, wb, nil)
	waitNodeFree(t, ctx, nodeNames()...)
	waitNoOtherPodGroups(t, ctx, ns)
	return qa, qb
}

// gatedJob is a Job of n tasks of gpus GPUs × 20480 MiB in queue.
type gatedJob struct {
	name, queue string
	n           int32
	gpus        int64
}

// competeGated creates the jobs with every pod behind a scheduling gate and
// lifts the gates once all exist, so no queue gets a head start; it returns
// when the gates are lifted.
func competeGated(t *testing.T, ctx context.Context, ns string, jobs ...gatedJob) time.Time {
	t.Helper()
	total := 0
	for _, j := range jobs {
		job := gpuJob(ns, j.name, j.n, j.gpus, 20480, 0, nil)
		job.Spec.Queue, job.Spec.MinAvailable = j.queue, 1
		job.Spec.Tasks[0].Template.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: holdGate}}
		createJob(t, ctx, job)
		total += int(j.n)
	}
	waitFor(t, ctx, fmt.Sprintf("%d gated pods", total), func() error {
		if n := len(listPods(t, ctx, ns)); n != total {
			return fmt.Errorf("%d pods", n)
		}
		return nil
	})
	start := time.Now()
	ungate(t, ctx, ns, listPods(t, ctx, ns))
	return start
}

// settledSplit waits until the running pods of ns hold steady for 4 s and
// returns those whose name starts with prefix, the others, and when the
// counts last changed.
func settledSplit(t *testing.T, ctx context.Context, ns, prefix string) (in, out []corev1.Pod, since time.Time) {
	t.Helper()
	nIn, nOut := -1, -1
	waitFor(t, ctx, "queue allocations to settle", func() error {
		running, _ := splitBound(listPods(t, ctx, ns))
		in, out = in[:0], out[:0]
		for _, p := range running {
			if strings.HasPrefix(p.Name, prefix) {
				in = append(in, p)
			} else {
				out = append(out, p)
			}
		}
		if len(in) != nIn || len(out) != nOut || len(running) == 0 {
			nIn, nOut, since = len(in), len(out), time.Now()
			return fmt.Errorf("%d %s*, %d others running", len(in), prefix, len(out))
		}
		if time.Since(since) < 4*time.Second {
			return fmt.Errorf("%d %s*, %d others running; holding", len(in), prefix, len(out))
		}
		return nil
	})
	return in, out, since
}

// cappedQueue creates a queue named after ns whose capability is capMiB of
// vgpu-memory.
func cappedQueue(t *testing.T, ctx context.Context, ns, suffix string, capMiB int64) string {
	t.Helper()
	name := queueName(ns, suffix)
	newQueue(t, ctx, ns, name, 1, corev1.ResourceList{api.DefaultResourceMemory: *resource.NewQuantity(capMiB, resource.DecimalSI)})
	return name
}
