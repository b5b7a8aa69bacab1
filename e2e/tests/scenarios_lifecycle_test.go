//go:build e2e

package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	batchv1alpha1 "volcano.sh/apis/pkg/apis/batch/v1alpha1"

	"github.com/volcano-vgpu/volcano-vgpu/api"
	"github.com/volcano-vgpu/volcano-vgpu/e2e/kubeletemu"
)

// simCompleteKey makes kwok finish a pod (e2e/sim/kwok-stages.yaml).
const simCompleteKey = "volcano-vgpu.io/sim-complete"

// vcctlRun submits a Job through `vcctl job run -f` (JSON is YAML).
func vcctlRun(t *testing.T, ctx context.Context, job *batchv1alpha1.Job) {
	t.Helper()
	body, err := json.Marshal(job)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), job.Name+".yaml")
	if err := os.WriteFile(file, body, 0o644); err != nil {
		t.Fatal(err)
	}
	out := vcctl(t, ctx, "job", "run", "-f", file, "-n", job.Namespace)
	if !strings.Contains(out, "run job "+job.Name+" successfully") {
		t.Fatalf("vcctl job run: %s", out)
	}
}

// TestScenarioSuspendResumeDeleteComplete: GPUs follow a Job through vcctl.
// A Job submitted with `vcctl job run` fills an 8-GPU node with whole-memory
// tasks; a second Job waits. `vcctl job suspend` frees the node and the second
// Job is placed; `vcctl job resume` brings the first back, waiting as a gang
// (nothing booked) until `vcctl job delete` removes the second; then the first
// completes (kwok finishes its pods) and its GPUs are free for a third Job.
func TestScenarioSuspendResumeDeleteComplete(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const node = "a100-40g-0" // 8 × 40960 MiB
	waitNodeFree(t, ctx, node)
	ns := newNamespace(t, ctx)

	vcctlRun(t, ctx, pinJob(gpuJob(ns, "hold", 8, 1, 40960, 0, nil), node))
	hold := waitJobRunning(t, ctx, ns, "hold", 8)
	checkNoDoubleBooking(t, ctx)
	waitServedOnly(t, ctx, node, hold)

	createJob(t, ctx, pinJob(gpuJob(ns, "waiter", 4, 1, 20480, 0, nil), node))
	waitUnschedulable(t, ctx, ns, waitJobPod(t, ctx, ns, "waiter"), "Insufficient volcano.sh/vgpu-memory", "MiB free")

	// Suspend: hold's pods go, their GPUs with them; the waiter is placed.
	vcctl(t, ctx, "job", "suspend", "-N", "hold", "-n", ns)
	waitJobPhase(t, ctx, ns, "hold", batchv1alpha1.Aborted)
	waiter := waitJobRunning(t, ctx, ns, "waiter", 4)
	waitFor(t, ctx, "hold's pods gone", func() error {
		if n := len(jobPods(t, ctx, ns, "hold")); n > 0 {
			return fmt.Errorf("%d left", n)
		}
		return nil
	})
	waitServedOnly(t, ctx, node, waiter)
	checkNoDoubleBooking(t, ctx)

	// Resume: the gang of 8 whole GPUs cannot fit beside the waiter (2 GPUs
	// used by binpack: 6 idle), so it waits with nothing booked.
	vcctl(t, ctx, "job", "resume", "-N", "hold", "-n", ns)
	waitFor(t, ctx, "hold's 8 pods recreated", func() error {
		if n := len(jobPods(t, ctx, ns, "hold")); n != 8 {
			return fmt.Errorf("%d pods", n)
		}
		return nil
	})
	waitSchedulerSessions(t, ctx, 3)
	for _, p := range jobPods(t, ctx, ns, "hold") {
		if p.Spec.NodeName != "" || p.Annotations[api.AssignmentKey] != "" {
			t.Errorf("resumed %s placed (%q) beside the waiter: the gang cannot fit", p.Name, p.Spec.NodeName)
		}
	}

	// Delete the waiter: the resumed Job is re-placed on all 8 GPUs.
	out := vcctl(t, ctx, "job", "delete", "-N", "waiter", "-n", ns)
	t.Logf("vcctl job delete: %s", strings.TrimSpace(out))
	hold = waitJobRunning(t, ctx, ns, "hold", 8)
	gpus := map[string]bool{}
	for _, p := range hold {
		for _, u := range gpusOf(t, p) {
			gpus[u] = true
		}
	}
	if len(gpus) != 8 {
		t.Errorf("resumed job on %d GPUs, want 8", len(gpus))
	}
	waitServedOnly(t, ctx, node, hold)
	checkNoDoubleBooking(t, ctx)
	checkPluginAgrees(t, ctx, node)

	// Complete: every pod finishes; the Job completes and frees the GPUs.
	for _, p := range hold {
		patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:"true"}}}`, simCompleteKey)
		if _, err := shared.kube.CoreV1().Pods(ns).Patch(ctx, p.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	waitJobPhase(t, ctx, ns, "hold", batchv1alpha1.Completed)
	waitServedOnly(t, ctx, node, nil)
	createJob(t, ctx, pinJob(gpuJob(ns, "after", 8, 1, 40960, 0, nil), node))
	waitJobRunning(t, ctx, ns, "after", 8)
	checkNoDoubleBooking(t, ctx)
	view := vcctl(t, ctx, "job", "view", "-N", "hold", "-n", ns)
	if !strings.Contains(view, "Completed") {
		t.Errorf("vcctl job view hold does not say Completed:\n%s", view)
	}
}

// TestScenarioDeleteDuringAdmission: pods deleted the moment they are bound
// (a Job deleted as it starts), some while kubelet is still allocating their
// devices, give every device back: afterwards the GPU they were pinned to
// runs its full maxShares of new pods. When the kubelet emulator kept the
// devices of a pod deleted mid-admission, each such pod left a replica of
// the GPU in use for ever, the GPU's last pods were refused
// (UnexpectedAdmissionError) and deleted, and the 100-pod scenario saw 79 of
// its 80 pods running (CI) or 70 (30 deletions, this machine).
func TestScenarioDeleteDuringAdmission(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const node, deleted, maxShares = "a100-40g-0", 20, 10
	waitNodeFree(t, ctx, node)
	gpu := nodeGPUs(t, ctx, node)[0]
	ns := newNamespace(t, ctx)
	pinned := func(name string) *corev1.Pod {
		p := gpuPod(ns, name, node, 1, 1024, 5)
		p.Annotations = map[string]string{api.GPUUUIDIncludeKey: gpu}
		return p
	}
	// A watch deletes each pod as soon as it is bound, within milliseconds,
	// while kubelet may be between Allocate and recording its devices.
	w, err := shared.kube.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	zero := int64(0)
	var uids []string
	for i := range deleted {
		p, err := shared.kube.CoreV1().Pods(ns).Create(ctx, pinned(fmt.Sprintf("gone-%02d", i)), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		uids = append(uids, string(p.UID))
		for bound := false; !bound; {
			select {
			case ev := <-w.ResultChan():
				q, ok := ev.Object.(*corev1.Pod)
				bound = ok && q.Name == p.Name && q.Spec.NodeName != ""
			case <-ctx.Done():
				t.Fatalf("waiting for %s to be bound: %v", p.Name, ctx.Err())
			}
		}
		if err := shared.kube.CoreV1().Pods(ns).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
			t.Fatal(err)
		}
	}
	waitNodeFree(t, ctx, node)
	var pods []*corev1.Pod
	for i := range maxShares {
		pods = append(pods, pinned(fmt.Sprintf("after-%02d", i)))
	}
	if _, err := createPods(ctx, pods, 4, nil); err != nil {
		t.Fatal(err)
	}
	running, _ := waitSettled(t, ctx, ns, maxShares, maxShares, 2*time.Second)
	for _, p := range running {
		if u := podAssignment(t, p).Containers[0].Devices[0].UUID; u != gpu {
			t.Errorf("%s on %s, outside its UUID filter %s", p.Name, u, gpu)
		}
	}
	raced := 0 // kubelet's record says the deletion came mid-admission
	for _, uid := range uids {
		if rec, err := kubeletemu.ReadRecord(shared.cl.Config.SocketDir, node, uid); err == nil && strings.Contains(rec.Error, "during its admission") {
			raced++
		}
	}
	t.Logf("%d pods deleted as they were bound (%d of them while kubelet allocated their devices); then %d new pods on the same GPU all run", deleted, raced, maxShares)
}
