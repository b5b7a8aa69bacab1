package plugin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/volcano-vgpu/volcano-vgpu/api"
	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/match"
	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/metrics"
)

func readLimiter(t *testing.T, r *pluginapi.ContainerAllocateResponse) LimiterInput {
	t.Helper()
	for _, m := range r.Mounts {
		if m.ContainerPath == "/etc/vcuda/vcuda.config" {
			if !m.ReadOnly {
				t.Error("limiter config is mounted read-write")
			}
			b, err := os.ReadFile(m.HostPath)
			if err != nil {
				t.Fatal(err)
			}
			var in LimiterInput
			if err := json.Unmarshal(b, &in); err != nil {
				t.Fatal(err)
			}
			return in
		}
	}
	t.Fatalf("no limiter config mount in %v", r.Mounts)
	return LimiterInput{}
}

func TestAllocateTwoPodsOnOneGPU(t *testing.T) {
	e := newEnv(t)
	e.add(t, pod("p1").app("main", share(0)).obj(t, e), pod("p2").app("main", shareSpec{gpu: 0, mem: 8192, cores: 50}).obj(t, e))
	ctx := context.Background()

	e.kubelet.set("p1", map[string][]string{"main": nil}) // kubelet is admitting p1
	r, err := e.p.Allocate(ctx, []string{e.id(0, 0)})
	if err != nil {
		t.Fatal(err)
	}
	if got := readLimiter(t, r); got.Name != "p1" || got.Devices[0].MemoryMiB != 4096 {
		t.Errorf("limiter config = %+v, want p1's 4096 MiB", got)
	}
	if got, want := cdiNames(r), []string{"nvidia.com/gpu=" + e.gpu(0), "volcano-vgpu.io/limiter=uid-p1_main"}; !slices.Equal(got, want) {
		t.Errorf("CDI devices = %q, want %q", got, want)
	}

	e.kubelet.set("p1", map[string][]string{"main": {e.id(0, 0)}})
	e.kubelet.set("p2", map[string][]string{"main": nil})
	r, err = e.p.Allocate(ctx, []string{e.id(0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	if got := readLimiter(t, r); got.Name != "p2" || got.Devices[0].MemoryMiB != 8192 || got.Devices[0].Cores != 50 {
		t.Errorf("limiter config = %+v, want p2's 8192 MiB / 50%%", got)
	}
}

func TestComputePolicyPrecedence(t *testing.T) {
	e := newEnv(t)
	e.p.setNodePolicy(nodeWith(api.ComputePolicyNodeKey, "none"))
	e.add(t, pod("pod-says").app("main", share(0)).annotate(api.ComputePolicyKey, "balance").obj(t, e), pod("node-says").app("main", share(1)).obj(t, e))
	for _, tc := range []struct {
		pod  string
		gpu  int
		want string
	}{{"pod-says", 0, "balance"}, {"node-says", 1, "none"}} {
		e.kubelet.set(tc.pod, map[string][]string{"main": nil})
		r, err := e.p.Allocate(context.Background(), []string{e.id(tc.gpu, 0)})
		if err != nil {
			t.Fatal(err)
		}
		if got := readLimiter(t, r).Policy; string(got) != tc.want {
			t.Errorf("%s: policy = %s, want %s", tc.pod, got, tc.want)
		}
	}
	e.p.setNodePolicy(nodeWith("other", "x"))
	e.add(t, pod("default").app("main", share(4)).obj(t, e))
	e.kubelet.set("default", map[string][]string{"main": nil})
	r, err := e.p.Allocate(context.Background(), []string{e.id(4, 0)})
	if err != nil {
		t.Fatal(err)
	}
	if got := readLimiter(t, r).Policy; got != api.ComputeFixed {
		t.Errorf("default policy = %s, want fixed", got)
	}
}

func TestAllocateRefusals(t *testing.T) {
	e := newEnv(t)
	e.add(t,
		pod("p1").app("main", share(0)).obj(t, e),
		pod("p2").app("main", share(0)).obj(t, e),
		pod("bad").app("main", share(5)).rawAssignment(`{"version":"v1"`).obj(t, e),
	)
	e.kubelet.set("p1", map[string][]string{"main": nil})
	e.kubelet.set("p2", map[string][]string{"main": nil})
	tests := []struct {
		name    string
		ids     []string
		want    error
		message string
	}{
		{"both pods pending on GPU 0 and kubelet lists both", []string{e.id(0, 0)}, match.ErrAmbiguous, "refusing to guess"},
		{"IDs on a GPU nobody is assigned", []string{e.id(6, 0)}, match.ErrNoMatch, "no pod bound to this node has a pending container assigned exactly GPUs " + e.gpu(6)},
		{"malformed assignment is named", []string{e.id(5, 0)}, match.ErrNoMatch, "ns/bad: volcano-vgpu.io/assignment: expected a valid JSON object"},
		{"not our IDs", []string{"nvidia0"}, match.ErrBadRequest, "not a vgpu-number device ID"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := e.p.Allocate(context.Background(), tc.ids)
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.message) {
				t.Errorf("err = %v, want %v containing %q", err, tc.want, tc.message)
			}
		})
	}
	if got := testutil.ToFloat64(e.p.metrics.AllocationFailures.WithLabelValues("ambiguous")); got != 1 {
		t.Errorf("ambiguous failures = %v, want 1", got)
	}
}

func TestAllocateWaitsForTheInformer(t *testing.T) {
	e := newEnv(t)
	e.p.opts.Config.Allocate.AssignmentWait.Duration = 5 * time.Second
	p := pod("late").app("main", share(1)).obj(t, e)
	e.kubelet.set("late", map[string][]string{"main": nil})
	if _, err := e.client.CoreV1().Pods("ns").Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	go func() {
		time.Sleep(100 * time.Millisecond)
		e.p.upsertPod(p) // the pod reaches the plugin's cache after kubelet's Allocate
	}()
	if _, err := e.p.Allocate(context.Background(), []string{e.id(1, 0)}); err != nil {
		t.Fatal(err)
	}
}

func TestInitAndMultiContainerServedWithoutAPIWrites(t *testing.T) {
	// Serving every container of a pod is known from the plugin's own records
	// on the node (the ledger, restored after a restart); the pod is never
	// written: the assignment annotation is the scheduler's alone.
	e := newEnv(t)
	e.add(t, pod("p1").init("setup", share(1)).app("a", share(2), share(3)).app("b", share(2)).obj(t, e))
	e.kubelet.set("p1", map[string][]string{"a": nil, "b": nil})
	e.client.ClearActions()
	ctx := context.Background()
	for i, step := range []struct {
		ids  []string
		want string
	}{
		{[]string{e.id(1, 0)}, "setup"},
		{[]string{e.id(2, 0), e.id(3, 0)}, "a"},
		{[]string{e.id(2, 1)}, "b"},
	} {
		r, err := e.p.Allocate(ctx, step.ids)
		if err != nil {
			t.Fatalf("container %s: %v", step.want, err)
		}
		if got := readLimiter(t, r).Container; got != step.want {
			t.Fatalf("served %s, want %s", got, step.want)
		}
		e.p.mu.Lock()
		served := e.p.ledger.Next("uid-p1")
		e.p.mu.Unlock()
		if served != i+1 {
			t.Errorf("after serving %s the ledger counts %d containers served, want %d", step.want, served, i+1)
		}
	}
	for _, a := range e.client.Actions() {
		if v := a.GetVerb(); v != "get" && v != "list" && v != "watch" {
			t.Errorf("Allocate wrote to the API: %s %s/%s", v, a.GetResource().Resource, a.GetSubresource())
		}
	}
	p, err := e.client.CoreV1().Pods("ns").Get(ctx, "p1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if a, err := api.DecodeAssignment(p.Annotations[api.AssignmentKey]); err != nil || a.Phase != api.PhaseAssigned {
		t.Errorf("assignment after serving every container: phase %q, err %v; want the scheduler's value untouched", a.Phase, err)
	}
}

func (e *testEnv) allIDs() []string {
	var available []string
	for i := range e.node.GPUs {
		for k := range 10 {
			available = append(available, e.id(i, k))
		}
	}
	return available
}

func TestPreferredSteersToAssignedGPUs(t *testing.T) {
	e := newEnv(t)
	e.add(t, pod("p1").app("main", share(6), share(7)).obj(t, e))
	e.kubelet.set("p1", map[string][]string{"main": nil})
	ids, err := e.p.Preferred(context.Background(), &pluginapi.ContainerPreferredAllocationRequest{AvailableDeviceIDs: e.allIDs(), AllocationSize: 2})
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]string{e.id(6, 0), e.id(7, 0)}, ids); d != "" {
		t.Errorf("preferred (-want +got):\n%s", d)
	}
}

func TestPreferredWaitsForTheAdmittedPodNotAnotherBoundOne(t *testing.T) {
	// Under load a pod bound to the node (cached, not yet at kubelet) can be
	// the only pending container of the right size while kubelet admits a
	// pod the plugin's cache does not hold yet. Steering to the bound pod's
	// GPUs gives the admitted pod another pod's assignment, which Allocate
	// then refuses ("kubelet lists none of their pods"): the pod is lost.
	// Preferred must wait for the admitted pod and steer to its GPUs.
	e := newEnv(t)
	e.p.opts.Config.Allocate.AssignmentWait.Duration = 5 * time.Second
	e.add(t, pod("bound").app("main", share(2), share(3)).obj(t, e))
	admitted := pod("admitted").app("main", share(6), share(7)).obj(t, e)
	if _, err := e.client.CoreV1().Pods(admitted.Namespace).Create(context.Background(), admitted, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.kubelet.set("admitted", map[string][]string{"main": nil})
	go func() {
		time.Sleep(300 * time.Millisecond)
		e.p.upsertPod(admitted) // the plugin's informer catches up
	}()
	ids, err := e.p.Preferred(context.Background(), &pluginapi.ContainerPreferredAllocationRequest{AvailableDeviceIDs: e.allIDs(), AllocationSize: 2})
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]string{e.id(6, 0), e.id(7, 0)}, ids); d != "" {
		t.Errorf("preferred (-want +got):\n%s", d)
	}
	if _, err := e.p.Allocate(context.Background(), ids); err != nil {
		t.Errorf("Allocate of the preferred IDs: %v", err)
	}
}

func TestAllocateDoesNotWaitForTerminatingPods(t *testing.T) {
	e := newEnv(t)
	e.p.opts.Config.Allocate.AssignmentWait.Duration = 5 * time.Second
	old := pod("old").app("main", share(1)).obj(t, e)
	e.add(t, old)
	e.kubelet.set("old", map[string][]string{"main": nil})
	if _, err := e.p.Allocate(context.Background(), []string{e.id(1, 0)}); err != nil {
		t.Fatal(err)
	}
	e.p.deletePod(string(old.UID)) // deleted from the API, kubelet still terminating it
	e.kubelet.set("old", map[string][]string{"main": {e.id(1, 0)}})
	start := time.Now()
	_, err := e.p.Allocate(context.Background(), []string{e.id(2, 0)})
	if !errors.Is(err, match.ErrNoMatch) {
		t.Fatalf("err = %v, want ErrNoMatch", err)
	}
	if waited := time.Since(start); waited > time.Second {
		t.Errorf("Allocate waited %v for a pod that is only terminating", waited)
	}
}

func TestAllocateRefusesWhatKubeletCannotConfirm(t *testing.T) {
	// One pod's assignment matches the IDs, but kubelet's PodResources does
	// not answer: Allocate must refuse (naming why and the setting), never
	// serve the match on assignments alone; once kubelet answers again within
	// the wait, it serves.
	e := newEnv(t)
	e.add(t, pod("p1").app("main", share(0)).obj(t, e))
	e.kubelet.set("p1", map[string][]string{"main": nil})
	e.kubelet.err = errors.New("connection refused")
	_, err := e.p.Allocate(context.Background(), []string{e.id(0, 0)})
	if !errors.Is(err, ErrUnverified) || !strings.Contains(err.Error(), "connection refused") ||
		!strings.Contains(err.Error(), "kubelet.podResourcesSocket") {
		t.Fatalf("Allocate without kubelet: err = %v, want ErrUnverified naming the cause and the setting", err)
	}
	if ids, err := e.p.Preferred(context.Background(), &pluginapi.ContainerPreferredAllocationRequest{
		AvailableDeviceIDs: []string{e.id(0, 0), e.id(1, 0)}, AllocationSize: 1}); err != nil || len(ids) != 0 {
		t.Errorf("Preferred without kubelet = %v, %v; want no preference", ids, err)
	}

	e.p.opts.Config.Allocate.AssignmentWait.Duration = 5 * time.Second
	go func() {
		time.Sleep(300 * time.Millisecond)
		e.kubelet.mu.Lock()
		e.kubelet.err = nil // kubelet is back
		e.kubelet.mu.Unlock()
	}()
	if _, err := e.p.Allocate(context.Background(), []string{e.id(0, 0)}); err != nil {
		t.Fatalf("Allocate once kubelet answers again: %v", err)
	}
}

func TestReason(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{name: "malformed device IDs", err: fmt.Errorf("ids: %w", match.ErrBadRequest), want: metrics.ReasonBadRequest},
		{name: "two pods fit", err: fmt.Errorf("x: %w", match.ErrAmbiguous), want: metrics.ReasonAmbiguous},
		{name: "no pod fits", err: fmt.Errorf("x: %w", match.ErrNoMatch), want: metrics.ReasonNoMatch},
		{name: "kubelet did not answer", err: fmt.Errorf("%w: PodResources", ErrUnverified), want: metrics.ReasonUnverified},
		{name: "MIG placement taken", err: fmt.Errorf("pod ns/p: %w: slices held", ErrMIGNotServed), want: metrics.ReasonMIG},
		{name: "MIG create failed", err: fmt.Errorf("pod ns/p: %w: ERROR_INSUFFICIENT_RESOURCES", ErrMIGCreate), want: metrics.ReasonMIG},
		{name: "a write failed", err: errors.New("writing the limiter config: disk full"), want: metrics.ReasonInternal},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := reason(tc.err)
			if got != tc.want {
				t.Errorf("reason(%v) = %q, want %q", tc.err, got, tc.want)
			}
			if !slices.Contains(metrics.AllocationReasons(), got) {
				t.Errorf("reason %q is not in the fixed set %v", got, metrics.AllocationReasons())
			}
		})
	}
}
