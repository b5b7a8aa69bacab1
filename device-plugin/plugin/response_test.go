package plugin

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/volcano-vgpu/volcano-vgpu/api"
	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/cdi"
	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/config"
)

// mount is a pluginapi.Mount without protobuf internals.
type mount struct {
	ContainerPath, HostPath string
	ReadOnly                bool
}

// plainResponse is a ContainerAllocateResponse without protobuf internals,
// for cmp.Diff.
type plainResponse struct {
	Envs        map[string]string
	Mounts      []mount
	CDIDevices  []string
	Annotations map[string]string
	Devices     int
}

func plain(r *pluginapi.ContainerAllocateResponse) plainResponse {
	out := plainResponse{Envs: r.Envs, Annotations: r.Annotations, CDIDevices: cdiNames(r), Devices: len(r.Devices)}
	for _, m := range r.Mounts {
		out.Mounts = append(out.Mounts, mount{ContainerPath: m.ContainerPath, HostPath: m.HostPath, ReadOnly: m.ReadOnly})
	}
	return out
}

func cdiNames(r *pluginapi.ContainerAllocateResponse) []string {
	var out []string
	for _, d := range r.CdiDevices {
		out = append(out, d.Name)
	}
	return out
}

func TestAllocateResponse(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*config.Config)
		// want gets the container's state dir, the state dir and GPUs 2 and 3.
		want func(dir, state, g2, g3 string) plainResponse
		// wantPreloadHook: the container's CDI spec runs the preload hook.
		wantPreloadHook bool
	}{
		{
			name: "CDI mode (default): GPUs by UUID, the limiter device, NVIDIA_VISIBLE_DEVICES=void",
			want: func(dir, state, g2, g3 string) plainResponse {
				return plainResponse{
					Envs:       envs("void"),
					Mounts:     mounts(dir, dir+"/ld.so.preload"),
					CDIDevices: []string{"nvidia.com/gpu=" + g2, "nvidia.com/gpu=" + g3, "volcano-vgpu.io/limiter=uid-p1_main"},
				}
			},
			wantPreloadHook: true,
		},
		{
			name: "CDI by index, with the annotation for runtimes that read only annotations",
			edit: func(c *config.Config) { c.CDI.DeviceNames, c.CDI.Annotations = "index", true },
			want: func(dir, state, g2, g3 string) plainResponse {
				names := []string{"nvidia.com/gpu=2", "nvidia.com/gpu=3", "volcano-vgpu.io/limiter=uid-p1_main"}
				return plainResponse{
					Envs:        envs("void"),
					Mounts:      mounts(dir, dir+"/ld.so.preload"),
					CDIDevices:  names,
					Annotations: map[string]string{"cdi.k8s.io/volcano-vgpu_uid-p1": names[0] + "," + names[1] + "," + names[2]},
				}
			},
			wantPreloadHook: true,
		},
		{
			name: "CDI without keeping the image's preload: no limiter device",
			edit: func(c *config.Config) { f := false; c.CDI.KeepImagePreload = &f },
			want: func(dir, state, g2, g3 string) plainResponse {
				return plainResponse{Envs: envs("void"), Mounts: mounts(dir, dir+"/ld.so.preload"),
					CDIDevices: []string{"nvidia.com/gpu=" + g2, "nvidia.com/gpu=" + g3}}
			},
		},
		{
			name: "CDI with another kind",
			edit: func(c *config.Config) { c.CDI.Kind = "example.com/gpu" },
			want: func(dir, state, g2, g3 string) plainResponse {
				return plainResponse{Envs: envs("void"), Mounts: mounts(dir, dir+"/ld.so.preload"),
					CDIDevices: []string{"example.com/gpu=" + g2, "example.com/gpu=" + g3, "volcano-vgpu.io/limiter=uid-p1_main"}}
			},
			wantPreloadHook: true,
		},
		{
			name: "env mode: NVIDIA_VISIBLE_DEVICES names the GPUs, no CDI",
			edit: func(c *config.Config) { f := false; c.CDI.Enabled = &f },
			want: func(dir, state, g2, g3 string) plainResponse {
				return plainResponse{Envs: envs(g2 + "," + g3), Mounts: mounts(dir, dir+"/ld.so.preload")}
			},
		},
		{
			name: "no preload at all: no preload mount, no hook",
			edit: func(c *config.Config) { f := false; c.Limiter.Preload = &f },
			want: func(dir, state, g2, g3 string) plainResponse {
				return plainResponse{Envs: envs("void"), Mounts: mounts(dir, ""),
					CDIDevices: []string{"nvidia.com/gpu=" + g2, "nvidia.com/gpu=" + g3}}
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			state := t.TempDir()
			e := newEnvWith(t, state, tc.edit)
			e.add(t, pod("p1").app("main", share(2), share(3)).annotate(api.ComputePolicyKey, "balance").obj(t, e))
			e.kubelet.set("p1", map[string][]string{"main": nil})
			r, err := e.p.Allocate(context.Background(), []string{e.id(3, 0), e.id(2, 4)})
			if err != nil {
				t.Fatal(err)
			}
			dir := state + "/containers/uid-p1/main"
			if d := cmp.Diff(tc.want(dir, state, e.gpu(2), e.gpu(3)), plain(r)); d != "" {
				t.Errorf("response (-want +got):\n%s", d)
			}
			if st, err := os.Stat(dir + "/shared"); err != nil || st.Mode().Perm() != 0o777 {
				t.Errorf("shared dir: %v, %v", st, err)
			}
			if e.cfg.PreloadEnabled() {
				if b, err := os.ReadFile(dir + "/ld.so.preload"); err != nil || string(b) != "/usr/local/volcano-vgpu/libvcuda.so\n" {
					t.Errorf("container's ld.so.preload = %q, %v", b, err)
				}
			}
			spec, err := cdi.Specs{Dir: filepath.Join(state, "cdi")}.Read("uid-p1", "main")
			if !tc.wantPreloadHook {
				if err == nil {
					t.Errorf("a CDI spec was written: %+v", spec)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			timeout := cdi.HookTimeoutSeconds
			want := cdi.Spec{CDIVersion: cdi.Version, Kind: cdi.LimiterKind, Devices: []cdi.Device{{Name: "uid-p1_main",
				ContainerEdits: cdi.ContainerEdits{Hooks: []cdi.Hook{{HookName: "createRuntime", Path: "/usr/local/volcano-vgpu/vgpu-cdi-hook", Timeout: &timeout,
					Args: []string{"vgpu-cdi-hook", "preload", "--file=" + dir + "/ld.so.preload", "--library=/usr/local/volcano-vgpu/libvcuda.so"}}}}}}}
			if d := cmp.Diff(want, spec); d != "" {
				t.Errorf("CDI spec (-want +got):\n%s", d)
			}
		})
	}
}

func envs(visible string) map[string]string {
	return map[string]string{EnvVisibleDevices: visible, EnvConfig: "/etc/vcuda/vcuda.config", EnvSharedDir: "/var/run/vcuda", EnvPolicy: "balance"}
}

// mounts are the limiter's mounts; preload "" leaves /etc/ld.so.preload out.
func mounts(dir, preload string) []mount {
	m := []mount{
		{ContainerPath: "/etc/vcuda/vcuda.config", HostPath: dir + "/vcuda.config", ReadOnly: true},
		{ContainerPath: "/etc/vcuda/vcuda.control", HostPath: dir + "/vcuda.control", ReadOnly: true}, // only the node writes allowances
		{ContainerPath: "/usr/local/volcano-vgpu/libvcuda.so", HostPath: "/usr/local/volcano-vgpu/libvcuda.so", ReadOnly: true},
		{ContainerPath: "/var/run/vcuda", HostPath: dir + "/shared", ReadOnly: false},
	}
	if preload != "" {
		m = append(m, mount{ContainerPath: "/etc/ld.so.preload", HostPath: preload, ReadOnly: true})
	}
	return m
}

func TestGCRemovesSpecsOfDeletedPods(t *testing.T) {
	state := t.TempDir()
	e := newEnvWith(t, state, nil)
	e.add(t, pod("p1").app("main", share(0)).obj(t, e))
	e.kubelet.set("p1", map[string][]string{"main": nil})
	if _, err := e.p.Allocate(context.Background(), []string{e.id(0, 0)}); err != nil {
		t.Fatal(err)
	}
	specs := cdi.Specs{Dir: filepath.Join(state, "cdi")}
	// a spec left by a pod whose state is already gone
	if _, err := specs.WriteLimiter("uid-gone", "main", cdi.Hook{HookName: cdi.CreateRuntime, Path: "/bin/true"}); err != nil {
		t.Fatal(err)
	}
	// and a MIG device's spec of another gone pod
	minors, err := cdi.ReadMIGMinors(e.cfg.CDI.MIGMinors)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := specs.WriteMIG("uid-gone-mig", "main", minors, cdi.ContainerEdits{}, []cdi.MIGDevice{{UUID: "MIG-1", GI: 1}}); err != nil {
		t.Fatal(err)
	}
	e.p.mu.Lock()
	e.p.synced = true
	e.p.mu.Unlock()
	e.p.GC(context.Background(), 0) // p1 is live: kept
	if got, _ := specs.Pods(); !cmp.Equal(got, []string{"uid-p1"}) {
		t.Errorf("specs after GC with p1 live = %v, want [uid-p1]", got)
	}
	e.p.deletePod("uid-p1")
	e.clock.SetTime(time.Now().Add(time.Hour)) // the pod's directory is old enough to go
	e.p.GC(context.Background(), 0)
	if got, _ := specs.Pods(); len(got) != 0 {
		t.Errorf("specs after p1 was deleted = %v, want none", got)
	}
}
