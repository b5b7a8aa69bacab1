package cdi

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// minorsA100 is the start of a mig-minors file as the driver writes it: 9
// minors per GPU instance (its access, then ci0..ci7), 15 GPU instances per GPU.
const minorsA100 = `config 1
monitor 2
gpu0/gi0/access 3
gpu0/gi0/ci0/access 4
gpu0/gi1/access 12
gpu0/gi1/ci0/access 13
gpu0/gi1/ci1/access 14
gpu1/gi2/access 156
gpu1/gi2/ci0/access 157
`

func TestMIGMinorsNodes(t *testing.T) {
	m, err := ParseMIGMinors(strings.NewReader(minorsA100))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		dev  MIGDevice
		want []string // device node paths
		err  string
	}{
		{name: "GPU 0, GPU instance 1", dev: MIGDevice{UUID: "MIG-a", GPUMinor: 0, GI: 1, CI: 0},
			want: []string{"/dev/nvidia0", "/dev/nvidia-caps/nvidia-cap12", "/dev/nvidia-caps/nvidia-cap13", "/dev/nvidiactl", "/dev/nvidia-uvm"}},
		{name: "second compute instance", dev: MIGDevice{UUID: "MIG-b", GPUMinor: 0, GI: 1, CI: 1},
			want: []string{"/dev/nvidia0", "/dev/nvidia-caps/nvidia-cap12", "/dev/nvidia-caps/nvidia-cap14", "/dev/nvidiactl", "/dev/nvidia-uvm"}},
		{name: "GPU minor 1", dev: MIGDevice{UUID: "MIG-c", GPUMinor: 1, GI: 2, CI: 0},
			want: []string{"/dev/nvidia1", "/dev/nvidia-caps/nvidia-cap156", "/dev/nvidia-caps/nvidia-cap157", "/dev/nvidiactl", "/dev/nvidia-uvm"}},
		{name: "a GPU instance the file lacks", dev: MIGDevice{UUID: "MIG-d", GPUMinor: 0, GI: 5}, err: "MIG device MIG-d: the driver lists no gpu0/gi5/access"},
		{name: "a compute instance the file lacks", dev: MIGDevice{UUID: "MIG-e", GPUMinor: 1, GI: 2, CI: 3}, err: "the driver lists no gpu1/gi2/ci3/access"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nodes, err := m.Nodes(tc.dev)
			if checkErr(t, "Nodes", err, ErrNoMIGMinors, tc.err) {
				return
			}
			var got []string
			for _, n := range nodes {
				got = append(got, n.Path)
			}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("device nodes (-want +got):\n%s", d)
			}
		})
	}
}

func TestParseMIGMinorsRefuses(t *testing.T) {
	for _, tc := range []struct{ name, text, want string }{
		{"three fields", "gpu0/gi0/access 3 x\n", `line 1: expected "<name> <minor>"`},
		{"minor not a number", "config 1\ngpu0/gi0/access x\n", `line 2: minor "x" is not a number`},
		{"negative minor", "config -1\n", `line 1: minor "-1"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := ParseMIGMinors(strings.NewReader(tc.text)); !errors.Is(err, ErrNoMIGMinors) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("ParseMIGMinors = %v, want ErrNoMIGMinors saying %q", err, tc.want)
			}
		})
	}
	missing := filepath.Join(t.TempDir(), "mig-minors")
	if _, err := ReadMIGMinors(missing); !errors.Is(err, ErrNoMIGMinors) || !strings.Contains(err.Error(), missing+" does not exist") {
		t.Errorf("ReadMIGMinors of a missing file = %v, want ErrNoMIGMinors naming it", err)
	}
}

func TestWriteMIG(t *testing.T) {
	s := Specs{Dir: filepath.Join(t.TempDir(), "cdi")}
	m, _ := ParseMIGMinors(strings.NewReader(minorsA100))
	const mig = "MIG-0a1b2c3d-0001-0002-0003-000000000004"
	names, err := s.WriteMIG("uid-1", "main", m, ContainerEdits{}, []MIGDevice{{UUID: mig, GPUMinor: 0, GI: 1, CI: 0}})
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]string{"volcano-vgpu.io/mig=uid-1_main_" + mig}, names); d != "" {
		t.Errorf("names (-want +got):\n%s", d)
	}
	if u, ok := MIGUUIDOf(strings.TrimPrefix(names[0], MIGKind+"=")); !ok || u != mig {
		t.Errorf("MIGUUIDOf = %q, %t; want %s", u, ok, mig)
	}
	raw := readSpecJSON(t, filepath.Join(s.Dir, "volcano-vgpu.io-mig_uid-1_main.json"))
	node := func(p string) any { return map[string]any{"path": p} }
	want := map[string]any{
		"cdiVersion": "0.5.0", "kind": "volcano-vgpu.io/mig",
		"devices": []any{map[string]any{"name": "uid-1_main_" + mig, "containerEdits": map[string]any{
			"env":         []any{"NVIDIA_VISIBLE_DEVICES=" + mig},
			"deviceNodes": []any{node("/dev/nvidia0"), node("/dev/nvidia-caps/nvidia-cap12"), node("/dev/nvidia-caps/nvidia-cap13"), node("/dev/nvidiactl"), node("/dev/nvidia-uvm")},
		}}},
	}
	if d := cmp.Diff(want, raw); d != "" {
		t.Errorf("spec file (-want +got):\n%s", d)
	}
	// listed with the pod's specs and removed with them
	if _, err := s.WriteLimiter("uid-2", "main", Hook{HookName: CreateRuntime, Path: "/bin/true"}); err != nil {
		t.Fatal(err)
	}
	if pods, _ := s.Pods(); !cmp.Equal(pods, []string{"uid-1", "uid-2"}) {
		t.Errorf("pods = %v, want uid-1 (MIG spec) and uid-2 (limiter spec)", pods)
	}
	if err := s.Remove("uid-1"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ReadMIG("uid-1", "main"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("uid-1's MIG spec after Remove: %v", err)
	}
	// a device the minors lack writes nothing
	if _, err := s.WriteMIG("uid-3", "main", m, ContainerEdits{}, []MIGDevice{{UUID: mig, GPUMinor: 3, GI: 1}}); !errors.Is(err, ErrNoMIGMinors) {
		t.Errorf("WriteMIG without the device's minors = %v, want ErrNoMIGMinors", err)
	}
	if _, err := s.ReadMIG("uid-3", "main"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a refused WriteMIG left a spec: %v", err)
	}
}
