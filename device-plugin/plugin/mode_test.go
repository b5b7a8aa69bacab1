package plugin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"

	"github.com/volcano-vgpu/volcano-vgpu/api"
	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/config"
)

func TestInventoryPublishesModes(t *testing.T) {
	var uuid1 string
	e := newEnvWith(t, t.TempDir(), func(c *config.Config) {
		uuid1 = simNode(t, testNode).GPUs[1].UUID
		c.Sharing.Nodes = map[string]api.GPUMode{testNode: api.ModeMPS}
		c.Sharing.GPUs = map[string]api.GPUMode{uuid1: api.ModeTimeSliced}
	})
	got := map[string]api.GPUMode{}
	want := map[string]api.GPUMode{}
	for _, g := range e.p.Inventory().GPUs {
		got[g.UUID] = g.Mode
		want[g.UUID] = api.ModeMPS // the node's rule
	}
	want[uuid1] = api.ModeTimeSliced // the GPU's own rule wins
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("published modes (-want +got):\n%s", d)
	}
	inv := e.p.Inventory()
	inv.Heartbeat = t0
	if _, err := api.EncodeInventory(inv); err != nil {
		t.Errorf("the inventory does not encode: %v", err)
	}
}

// mpsEnv is a test env whose GPU 1 is in MPS mode (the others time-sliced).
func mpsEnv(t *testing.T, edit func(*config.Config)) (*testEnv, string) {
	t.Helper()
	state := t.TempDir()
	mpsGPU := simNode(t, testNode).GPUs[1].UUID
	return newEnvWith(t, state, func(c *config.Config) {
		c.Sharing.GPUs = map[string]api.GPUMode{mpsGPU: api.ModeMPS}
		if edit != nil {
			edit(c)
		}
	}), state
}

func runAs(p *corev1.Pod, pod, container *int64) *corev1.Pod {
	if pod != nil {
		p.Spec.SecurityContext = &corev1.PodSecurityContext{RunAsUser: pod}
	}
	if container != nil {
		p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{RunAsUser: container}
	}
	return p
}

func TestAllocateMPS(t *testing.T) {
	cdiOff := func(c *config.Config) { f := false; c.CDI.Enabled = &f }
	for _, tc := range []struct {
		name    string
		edit    func(*config.Config)
		cores   int
		visible func(e *testEnv) string
		// wantThreads "" means a time-sliced container (GPU 0)
		wantThreads string
	}{
		{name: "CDI mode: pipe dir, shm, MPS variables", cores: 30, wantThreads: "30",
			visible: func(*testEnv) string { return "void" }},
		{name: "env mode: the same MPS additions", edit: cdiOff, cores: 30, wantThreads: "30",
			visible: func(e *testEnv) string { return e.gpu(1) }},
		{name: "no cores asked: the whole SM set", cores: 0, wantThreads: "100",
			visible: func(*testEnv) string { return "void" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, state := mpsEnv(t, tc.edit)
			s := share(1)
			s.cores, s.mem = tc.cores, 4096
			e.add(t, pod("p1").app("main", s).annotate(api.ComputePolicyKey, "balance").obj(t, e))
			e.kubelet.set("p1", map[string][]string{"main": nil})
			r, err := e.p.Allocate(context.Background(), []string{e.id(1, 0)})
			if err != nil {
				t.Fatal(err)
			}
			dir := state + "/containers/uid-p1/main"
			wantEnvs := envs(tc.visible(e))
			wantEnvs["CUDA_MPS_PIPE_DIRECTORY"] = "/run/volcano-vgpu/mps"
			wantEnvs["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] = tc.wantThreads
			wantEnvs["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] = "0=4096M" // its memory cap
			wantMounts := append(mounts(dir, dir+"/ld.so.preload"),
				mount{ContainerPath: "/run/volcano-vgpu/mps", HostPath: state + "/mps/" + e.gpu(1) + "/pipe", ReadOnly: true}, // a tenant cannot remove the daemon's socket
				mount{ContainerPath: "/dev/shm", HostPath: state + "/mps/shm", ReadOnly: false})
			got := plain(r)
			if d := cmp.Diff(wantEnvs, got.Envs); d != "" {
				t.Errorf("envs (-want +got):\n%s", d)
			}
			if d := cmp.Diff(wantMounts, got.Mounts); d != "" {
				t.Errorf("mounts (-want +got):\n%s", d)
			}
			b, err := os.ReadFile(dir + "/vcuda.config")
			if err != nil {
				t.Fatal(err)
			}
			var in LimiterInput
			if err := json.Unmarshal(b, &in); err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(in.MPSThreadPercent) != tc.wantThreads {
				t.Errorf("limiter config MPS percentage = %d, want %s", in.MPSThreadPercent, tc.wantThreads)
			}
		})
	}
}

func TestAllocateMPSRefused(t *testing.T) {
	uid := func(v int64) *int64 { return &v }
	for _, tc := range []struct {
		name    string
		pod     func(e *testEnv) *corev1.Pod
		ids     func(e *testEnv) []string
		edit    func(*config.Config)
		wantErr string
	}{
		{name: "two GPUs, one of them MPS",
			pod:     func(e *testEnv) *corev1.Pod { return pod("p1").app("main", share(0), share(1)).obj(t, e) },
			ids:     func(e *testEnv) []string { return []string{e.id(0, 0), e.id(1, 0)} },
			wantErr: "an MPS GPU serves one GPU per container"},
		{name: "the pod runs as another user than the MPS server's",
			pod:     func(e *testEnv) *corev1.Pod { return runAs(pod("p1").app("main", share(1)).obj(t, e), uid(1000), nil) },
			ids:     func(e *testEnv) []string { return []string{e.id(1, 0)} },
			wantErr: `container "main" runs as user 1000, and the MPS server of GPU`},
		{name: "the container's own user wins over the pod's",
			pod: func(e *testEnv) *corev1.Pod {
				return runAs(pod("p1").app("main", share(1)).obj(t, e), uid(0), uid(1000))
			},
			ids:     func(e *testEnv) []string { return []string{e.id(1, 0)} },
			wantErr: "set runAsUser: 0"},
		{name: "the configured user is served",
			pod:  func(e *testEnv) *corev1.Pod { return runAs(pod("p1").app("main", share(1)).obj(t, e), uid(1000), nil) },
			ids:  func(e *testEnv) []string { return []string{e.id(1, 0)} },
			edit: func(c *config.Config) { v := int64(1000); c.MPS.ClientUID = &v }},
		{name: "another user on a time-sliced GPU is fine",
			pod: func(e *testEnv) *corev1.Pod { return runAs(pod("p1").app("main", share(0)).obj(t, e), uid(1000), nil) },
			ids: func(e *testEnv) []string { return []string{e.id(0, 0)} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, _ := mpsEnv(t, tc.edit)
			e.add(t, tc.pod(e))
			e.kubelet.set("p1", map[string][]string{"main": nil})
			_, err := e.p.Allocate(context.Background(), tc.ids(e))
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("Allocate: %v", err)
				}
				return
			}
			if !errors.Is(err, ErrMPS) || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("Allocate = %v, want ErrMPS with %q", err, tc.wantErr)
			}
		})
	}
}

// The compute controller leaves MPS GPUs to the SM partition.
func TestTenanciesSkipMPS(t *testing.T) {
	e, _ := mpsEnv(t, nil)
	e.add(t, pod("p1").app("main", share(1)).obj(t, e), pod("p2").app("main", share(0)).obj(t, e))
	e.kubelet.set("p1", map[string][]string{"main": nil})
	e.kubelet.set("p2", map[string][]string{"main": nil})
	for _, ids := range [][]string{{e.id(1, 0)}, {e.id(0, 0)}} {
		if _, err := e.p.Allocate(context.Background(), ids); err != nil {
			t.Fatal(err)
		}
	}
	ts, err := e.p.tenancies()
	if err != nil {
		t.Fatal(err)
	}
	var gpus []string
	for _, x := range ts {
		gpus = append(gpus, x.UUID)
	}
	if d := cmp.Diff([]string{e.gpu(0)}, gpus); d != "" {
		t.Errorf("controlled GPUs (-want +got):\n%s", d)
	}
}
