package plugin

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"

	"github.com/volcano-vgpu/volcano-vgpu/api"
	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/config"
	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/gpu"
	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/memguard"
)

// TestMemoryGuardTenants: the guard's view of the node comes from what
// Allocate served (caps, per GPU, with the model's context size; whether
// libvcuda holds the container to a compute share there) and from the
// pods' statuses (runtime container IDs → names).
func TestMemoryGuardTenants(t *testing.T) {
	for _, tc := range []struct {
		name        string
		cores       int
		policy      string
		wantCompute bool
	}{
		{name: "a 50% share", cores: 50, wantCompute: true},
		{name: "best effort", cores: 0, wantCompute: true},
		{name: "the whole GPU", cores: 100},
		{name: "compute policy none", cores: 50, policy: "none"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnvWith(t, t.TempDir(), func(c *config.Config) { c.Limiter.ContextMiB = map[string]uint32{"default": 300} })
			b := pod("p1").app("main", shareSpec{gpu: 1, mem: 8192, cores: tc.cores})
			if tc.policy != "" {
				b.annotate(api.ComputePolicyKey, tc.policy)
			}
			e.add(t, b.obj(t, e))
			e.kubelet.set("p1", map[string][]string{"main": nil})
			if _, err := e.p.Allocate(context.Background(), []string{e.id(1, 0)}); err != nil {
				t.Fatal(err)
			}
			want := []memguard.Tenant{{Key: "uid-p1/main", PodUID: "uid-p1", Namespace: "ns", Pod: "p1", Container: "main",
				UUID: e.gpu(1), Index: 1, Model: "NVIDIA A100-PCIE-40GB", CapMiB: 8192, ContextMiB: 300, Compute: tc.wantCompute, Cores: tc.cores}}
			if diff := cmp.Diff(want, e.p.memTenants()); diff != "" {
				t.Errorf("memTenants (-want +got):\n%s", diff)
			}
		})
	}
}

// TestContainerNames: runtime container IDs → names, from the pods' statuses.
func TestContainerNames(t *testing.T) {
	e := newEnv(t)
	p1 := pod("p1").app("main", shareSpec{gpu: 1, mem: 8192, cores: 50}).obj(t, e)
	e.add(t, p1)
	if _, ok := e.p.containerName("uid-p1", "abc123"); ok {
		t.Error("a container that has not started has a name")
	}
	started := p1.DeepCopy()
	started.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "main", ContainerID: "containerd://abc123"}}
	e.p.upsertPod(started)
	if n, ok := e.p.containerName("uid-p1", "abc123"); !ok || n != "main" {
		t.Errorf("containerName = %q, %v; want main", n, ok)
	}
	e.p.deletePod("uid-p1")
	if _, ok := e.p.containerName("uid-p1", "abc123"); ok {
		t.Error("a deleted pod's container still has a name")
	}
}

// withMemory is a device library that lists processes.
type withMemory struct {
	gpu.DeviceLib
	src memguard.Source
}

func (w withMemory) MemorySource() memguard.Source { return w.src }

type noProcs struct{}

func (noProcs) Running(string) ([]memguard.Process, error) { return nil, nil }

func TestMemoryGuardStarts(t *testing.T) {
	for _, tc := range []struct {
		name      string
		disabled  bool
		procs     bool
		unlimited config.UnlimitedAction
		want      bool
	}{
		{"on where the library lists processes", false, true, "", true},
		{"unlimited processes killed", false, true, config.UnlimitedKill, true},
		{"unlimited processes ignored", false, true, config.UnlimitedIgnore, true},
		{"off by config", true, true, "", false},
		{"a library that cannot list processes (simulated NVML)", false, false, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnvWith(t, t.TempDir(), func(c *config.Config) {
				c.MemoryGuard.Disabled = tc.disabled
				if tc.unlimited != "" {
					c.MemoryGuard.UnlimitedProcesses = tc.unlimited
				}
			})
			if tc.procs {
				e.p.opts.Lib = withMemory{DeviceLib: e.p.opts.Lib, src: noProcs{}}
			}
			r, stop := e.p.memoryGuard(context.Background())
			defer stop()
			if got := r != nil; got != tc.want {
				t.Fatalf("guard started = %v, want %v", got, tc.want)
			}
			if r != nil && (r.Period != e.cfg.MemoryGuard.Period.Duration || r.Policy.ToleranceMiB != 64 || r.Policy.UncountedContextMiB != 1024) {
				t.Errorf("guard = period %s, policy %+v: want the config's", r.Period, r.Policy)
			}
			if r != nil && ((r.Limited != nil) != (tc.unlimited != config.UnlimitedIgnore) || r.KillUnlimited != (tc.unlimited == config.UnlimitedKill)) {
				t.Errorf("guard: looks for unlimited processes %v, kills them %v; want memoryGuard.unlimitedProcesses %q", r.Limited != nil, r.KillUnlimited, tc.unlimited)
			}
		})
	}
}

// TestOwnersThroughProcRoot: a host pid maps to its vGPU container through
// its cgroup file under the plugin's proc root and the pod's status.
func TestOwnersThroughProcRoot(t *testing.T) {
	root := t.TempDir()
	const id = "4f1a9c0d2b3e4f5a6b7c8d9e0f1a2b3c"
	if err := os.MkdirAll(filepath.Join(root, "4242"), 0o755); err != nil {
		t.Fatal(err)
	}
	cg := "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod0b6d7e5c_2f3a_4c1e_9a7b_5d4c3b2a1f00.slice/cri-containerd-" + id + ".scope\n"
	if err := os.WriteFile(filepath.Join(root, "4242", "cgroup"), []byte(cg), 0o644); err != nil {
		t.Fatal(err)
	}
	e := newEnv(t)
	e.p.opts.ProcRoot = root
	pd := pod("p1").app("main", share(0)).obj(t, e)
	pd.UID = "0b6d7e5c-2f3a-4c1e-9a7b-5d4c3b2a1f00"
	if _, ok := e.p.owners(4242); ok {
		t.Fatal("a pod the plugin has not seen owns a process")
	}
	pd.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "main", ContainerID: "containerd://" + id}}
	e.p.upsertPod(pd)
	if k, ok := e.p.owners(4242); !ok || k != "0b6d7e5c-2f3a-4c1e-9a7b-5d4c3b2a1f00/main" {
		t.Errorf("owners(4242) = %q, %v; want the pod's main container", k, ok)
	}
}
