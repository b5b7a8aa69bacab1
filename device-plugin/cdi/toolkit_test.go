package cdi

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// toolkitYAML is a trimmed spec as nvidia-ctk cdi generate writes it: one
// GPU with its own device node, spec-level nodes, mounts and hooks.
const toolkitYAML = `cdiVersion: 0.5.0
kind: nvidia.com/gpu
devices:
- name: GPU-0a1b2c3d-0000-0000-0000-000000000000
  containerEdits:
    deviceNodes:
    - path: /dev/nvidia0
    mounts:
    - hostPath: /dev/shm/device-only
      containerPath: /device-only
containerEdits:
  env:
  - NVIDIA_VISIBLE_DEVICES=void
  - NVIDIA_CTK_LIBCUDA_DIR=/usr/lib/x86_64-linux-gnu
  deviceNodes:
  - path: /dev/nvidia-modeset
  - path: /dev/nvidia-uvm
  - path: /dev/nvidiactl
  - path: /dev/nvidia1
  - path: /dev/nvidia-caps/nvidia-cap1
  hooks:
  - hookName: createContainer
    path: /usr/bin/nvidia-cdi-hook
    args: [nvidia-cdi-hook, update-ldcache, --folder, /usr/lib/x86_64-linux-gnu]
  mounts:
  - hostPath: /usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15
    containerPath: /usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15
    options: [ro, nosuid, nodev, bind]
`

var toolkitEditsWant = ContainerEdits{
	Env: []string{"NVIDIA_CTK_LIBCUDA_DIR=/usr/lib/x86_64-linux-gnu"},
	// the GPU's and the MIG capability's nodes are each device's own
	DeviceNodes: []DeviceNode{{Path: "/dev/nvidia-modeset"}, {Path: "/dev/nvidia-uvm"}, {Path: "/dev/nvidiactl"}},
	Hooks: []Hook{{HookName: "createContainer", Path: "/usr/bin/nvidia-cdi-hook",
		Args: []string{"nvidia-cdi-hook", "update-ldcache", "--folder", "/usr/lib/x86_64-linux-gnu"}}},
	Mounts: []Mount{{HostPath: "/usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15",
		ContainerPath: "/usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15", Options: []string{"ro", "nosuid", "nodev", "bind"}}},
}

func TestToolkitEdits(t *testing.T) {
	for _, tc := range []struct {
		name  string
		etc   map[string]string // files in the low-priority directory
		run   map[string]string // files in the high-priority directory
		want  ContainerEdits
		files []string // relative to the test's root
		err   string   // ErrToolkitSpec saying this
	}{
		{name: "spec-level edits copied, device-level ones and other GPUs' nodes not",
			run: map[string]string{"nvidia.yaml": toolkitYAML}, want: toolkitEditsWant, files: []string{"run/nvidia.yaml"}},
		{name: "no toolkit spec: nothing, not an error",
			run: map[string]string{"other.json": `{"cdiVersion":"0.5.0","kind":"vendor.com/nic","devices":[],"containerEdits":{"env":["A=1"]}}`}},
		{name: "no directories at all"},
		{name: "JSON spec, the plugin's own specs and temporary files ignored",
			run: map[string]string{
				"nvidia.json":                           `{"cdiVersion":"0.5.0","kind":"nvidia.com/gpu","devices":[],"containerEdits":{"env":["A=1"]}}`,
				"volcano-vgpu.io-mig_uid_main.json":     `{"cdiVersion":"0.5.0","kind":"nvidia.com/gpu","devices":[],"containerEdits":{"env":["B=1"]}}`,
				".volcano-vgpu.io_1.tmp":                `{`,
				"volcano-vgpu.io-limiter_uid_main.json": `{`,
				".nvidia.yaml.swp":                      `{`,
			},
			want: ContainerEdits{Env: []string{"A=1"}}, files: []string{"run/nvidia.json"}},
		{name: "two directories: the later one's wins a shared target, both are kept otherwise",
			etc:   map[string]string{"nvidia.yaml": "kind: nvidia.com/gpu\ncontainerEdits:\n  env: [A=etc, C=3]\n  mounts: [{hostPath: /old, containerPath: /lib/libcuda.so}, {hostPath: /x, containerPath: /x}]\n"},
			run:   map[string]string{"nvidia.yaml": "kind: nvidia.com/gpu\ncontainerEdits:\n  env: [A=run]\n  mounts: [{hostPath: /new, containerPath: /lib/libcuda.so}]\n"},
			want:  ContainerEdits{Env: []string{"A=run", "C=3"}, Mounts: []Mount{{HostPath: "/new", ContainerPath: "/lib/libcuda.so"}, {HostPath: "/x", ContainerPath: "/x"}}},
			files: []string{"run/nvidia.yaml", "etc/nvidia.yaml"}},
		{name: "malformed toolkit spec: an error naming the file",
			run: map[string]string{"nvidia.yaml": "kind: nvidia.com/gpu\ncontainerEdits:\n  env: notalist\n"},
			err: "run/nvidia.yaml"},
		{name: "a toolkit-named file that is not YAML at all: an error naming it",
			run: map[string]string{"nvidia.json": "{\"kind\": "},
			err: "run/nvidia.json"},
		{name: "another vendor's broken file is skipped",
			run:  map[string]string{"acme.json": "{\"kind\": ", "nvidia.yaml": "kind: nvidia.com/gpu\ncontainerEdits: {env: [A=1]}\n"},
			want: ContainerEdits{Env: []string{"A=1"}}, files: []string{"run/nvidia.yaml"}},
		{name: "another kind's file with wrong types is skipped",
			run: map[string]string{"nvidia-nic.yaml": "kind: nvidia.com/nic\ncontainerEdits: {env: notalist}\n"}},
		{name: "a spec-level hook without a path: an error naming the file",
			run: map[string]string{"nvidia.yaml": "kind: nvidia.com/gpu\ncontainerEdits:\n  hooks: [{hookName: createContainer}]\n"},
			err: "run/nvidia.yaml: spec-level containerEdits: hook without a name and an absolute path"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			for dir, files := range map[string]map[string]string{"etc": tc.etc, "run": tc.run} {
				for name, text := range files {
					if err := os.MkdirAll(filepath.Join(root, dir), 0o755); err != nil {
						t.Fatal(err)
					}
					if err := os.WriteFile(filepath.Join(root, dir, name), []byte(text), 0o644); err != nil {
						t.Fatal(err)
					}
				}
			}
			got, err := ToolkitEdits([]string{filepath.Join(root, "etc"), filepath.Join(root, "run")}, DefaultKind)
			if checkErr(t, "ToolkitEdits", err, ErrToolkitSpec, tc.err) {
				return
			}
			var files []string
			for _, f := range got.Files {
				rel, _ := filepath.Rel(root, f)
				files = append(files, rel)
			}
			if d := cmp.Diff(tc.files, files); d != "" {
				t.Errorf("files (-want +got):\n%s", d)
			}
			if got.Found() != (len(tc.files) > 0) {
				t.Errorf("Found = %t with files %v", got.Found(), files)
			}
			if d := cmp.Diff(tc.want, got.Edits); d != "" {
				t.Errorf("edits (-want +got):\n%s", d)
			}
		})
	}
}

func TestWriteMIGWithDriverEdits(t *testing.T) {
	s := Specs{Dir: filepath.Join(t.TempDir(), "cdi")}
	m, _ := ParseMIGMinors(strings.NewReader(minorsA100))
	const mig = "MIG-0a1b2c3d-0001-0002-0003-000000000004"
	driver := toolkitEditsWant
	driver.AdditionalGIDs = []uint32{44}
	if _, err := s.WriteMIG("uid-1", "main", m, driver, []MIGDevice{{UUID: mig, GPUMinor: 0, GI: 1, CI: 0}}); err != nil {
		t.Fatal(err)
	}
	raw := readSpecJSON(t, filepath.Join(s.Dir, "volcano-vgpu.io-mig_uid-1_main.json"))
	want := map[string]any{
		"env": []any{"NVIDIA_CTK_LIBCUDA_DIR=/usr/lib/x86_64-linux-gnu"},
		// nvidiactl and nvidia-uvm are the device's own already
		"deviceNodes": []any{map[string]any{"path": "/dev/nvidia-modeset"}},
		"hooks": []any{map[string]any{"hookName": "createContainer", "path": "/usr/bin/nvidia-cdi-hook",
			"args": []any{"nvidia-cdi-hook", "update-ldcache", "--folder", "/usr/lib/x86_64-linux-gnu"}}},
		"mounts": []any{map[string]any{"hostPath": "/usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15",
			"containerPath": "/usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15", "options": []any{"ro", "nosuid", "nodev", "bind"}}},
		"additionalGids": []any{44.0},
	}
	if d := cmp.Diff(want, raw["containerEdits"]); d != "" {
		t.Errorf("spec-level edits (-want +got):\n%s", d)
	}
	if raw["cdiVersion"] != "0.7.0" { // additionalGids need CDI 0.7.0
		t.Errorf("cdiVersion = %v, want 0.7.0", raw["cdiVersion"])
	}
	if devs := raw["devices"].([]any); len(devs) != 1 {
		t.Fatalf("devices = %v", devs)
	}
	// without driver edits the spec has no spec-level edits (TestWriteMIG)
	if _, err := s.WriteMIG("uid-2", "main", m, ContainerEdits{}, []MIGDevice{{UUID: mig, GPUMinor: 0, GI: 1, CI: 0}}); err != nil {
		t.Fatal(err)
	}
	sp, err := s.ReadMIG("uid-2", "main")
	if err != nil || sp.ContainerEdits != nil || sp.CDIVersion != Version {
		t.Errorf("spec without driver edits: %+v, %v; want no containerEdits and version %s", sp, err, Version)
	}
}
