package containeremu

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
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
