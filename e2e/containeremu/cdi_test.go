package containeremu

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/cdi"
	"github.com/volcano-vgpu/volcano-vgpu/e2e/kubeletemu"
)

// TestLimiterHooksRun: the device plugin's spec is read from the spec
// directory and its createRuntime hook gets the OCI state of a bundle whose
// root is the host's /; a failing hook fails the container.
func TestLimiterHooksRun(t *testing.T) {
	d := t.TempDir()
	specDir := filepath.Join(d, "cdi")
	got := filepath.Join(d, "state.json")
	hook := filepath.Join(d, "hook.sh")
	if err := os.WriteFile(hook, []byte("#!/bin/sh\n[ \"$1\" = ok ] || { echo refused >&2; exit 3; }\ncat > "+got+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	specs := cdi.Specs{Dir: specDir}
	if _, err := specs.WriteLimiter("uid-a", "main", cdi.Hook{HookName: cdi.CreateRuntime, Path: hook, Args: []string{"hook.sh", "ok"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := specs.WriteLimiter("uid-b", "main", cdi.Hook{HookName: cdi.CreateRuntime, Path: hook, Args: []string{"hook.sh", "no"}}); err != nil {
		t.Fatal(err)
	}
	c := Container{Node: "n", NodeGPUs: fourGPUs(), Response: kubeletemu.AllocateResponse{CDIDevices: []string{"nvidia.com/gpu=0", "volcano-vgpu.io/limiter=uid-a_main"}}}
	sp, err := c.limiterSpecs(specDir)
	if err != nil {
		t.Fatal(err)
	}
	if err := runHooks(context.Background(), sp, filepath.Join(d, "c1"), "c1", []string{"/bin/app"}, []string{"PATH=/bin"}); err != nil {
		t.Fatal(err)
	}
	var state struct{ Bundle string }
	b, _ := os.ReadFile(got)
	if err := json.Unmarshal(b, &state); err != nil {
		t.Fatalf("hook's stdin %q: %v", b, err)
	}
	if cfg, _ := os.ReadFile(filepath.Join(state.Bundle, "config.json")); !strings.Contains(string(cfg), `"root":{"path":"/"}`) || !strings.Contains(string(cfg), `"args":["/bin/app"]`) {
		t.Errorf("bundle config = %s", cfg)
	}

	c.Response.CDIDevices = []string{"volcano-vgpu.io/limiter=uid-b_main"}
	if sp, err = c.limiterSpecs(specDir); err != nil {
		t.Fatal(err)
	}
	if err := runHooks(context.Background(), sp, filepath.Join(d, "c2"), "c2", []string{"/bin/app"}, nil); err == nil || !strings.Contains(err.Error(), "refused") {
		t.Errorf("failing hook: err = %v, want its stderr", err)
	}
	c.Response.CDIDevices = []string{"volcano-vgpu.io/limiter=uid-c_main"}
	if _, err := c.limiterSpecs(specDir); !errors.Is(err, ErrUnresolvableCDI) {
		t.Errorf("missing spec: err = %v, want ErrUnresolvableCDI", err)
	}
}

// TestMIGDevicesResolveFromThePluginsSpec: a volcano-vgpu.io/mig name
// resolves to the MIG device its spec's NVIDIA_VISIBLE_DEVICES names, only
// with the spec present and the device nodes a MIG device needs.
func TestMIGDevicesResolveFromThePluginsSpec(t *testing.T) {
	const mig = "MIG-11111111-2222-3333-4444-555555555555"
	minors, err := cdi.ParseMIGMinors(strings.NewReader("gpu0/gi1/access 12\ngpu0/gi1/ci0/access 13\n"))
	if err != nil {
		t.Fatal(err)
	}
	name := "volcano-vgpu.io/mig=uid-a_main_" + mig
	for _, tc := range []struct {
		name  string
		write func(t *testing.T, dir string)
		cdi   []string
		want  []string // visible UUIDs; nil: unresolvable
	}{
		{name: "the plugin's spec", cdi: []string{name, "volcano-vgpu.io/limiter=uid-a_main"}, want: []string{mig},
			write: func(t *testing.T, dir string) {
				if _, err := (cdi.Specs{Dir: dir}).WriteMIG("uid-a", "main", minors, cdi.ContainerEdits{}, []cdi.MIGDevice{{UUID: mig, GI: 1}}); err != nil {
					t.Fatal(err)
				}
			}},
		{name: "no spec on the node", cdi: []string{name}},
		{name: "another pod's spec only", cdi: []string{"volcano-vgpu.io/mig=uid-b_main_" + mig},
			write: func(t *testing.T, dir string) {
				if _, err := (cdi.Specs{Dir: dir}).WriteMIG("uid-a", "main", minors, cdi.ContainerEdits{}, []cdi.MIGDevice{{UUID: mig, GI: 1}}); err != nil {
					t.Fatal(err)
				}
			}},
		{name: "a spec without the capability nodes", cdi: []string{name},
			write: func(t *testing.T, dir string) {
				sp := cdi.Spec{CDIVersion: cdi.Version, Kind: cdi.MIGKind, Devices: []cdi.Device{{Name: "uid-a_main_" + mig,
					ContainerEdits: cdi.ContainerEdits{Env: []string{"NVIDIA_VISIBLE_DEVICES=" + mig}, DeviceNodes: []cdi.DeviceNode{{Path: "/dev/nvidia0"}}}}}}
				b, _ := json.Marshal(sp)
				if err := os.MkdirAll(dir, 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(dir, "volcano-vgpu.io-mig_uid-a_main.json"), b, 0o644); err != nil {
					t.Fatal(err)
				}
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "cdi")
			if tc.write != nil {
				tc.write(t, dir)
			}
			c := Container{Node: "n", NodeGPUs: fourGPUs(), NodeMIG: []GPU{{UUID: mig, MemoryMiB: 9728}}, CDISpecDir: dir,
				Response: kubeletemu.AllocateResponse{CDIDevices: tc.cdi, Envs: map[string]string{"NVIDIA_VISIBLE_DEVICES": "void"}}}
			got, err := c.VisibleGPUs()
			if tc.want == nil {
				if !errors.Is(err, ErrUnresolvableCDI) {
					t.Fatalf("VisibleGPUs = %v, %v; want ErrUnresolvableCDI", got, err)
				}
				return
			}
			if err != nil || !slices.Equal(got, tc.want) {
				t.Errorf("VisibleGPUs = %v, %v; want %v", got, err, tc.want)
			}
		})
	}
}
