package cdi

import (
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestWriteLimiter(t *testing.T) {
	s := Specs{Dir: filepath.Join(t.TempDir(), "cdi")} // created on first write
	hook := Hook{HookName: CreateRuntime, Path: "/usr/local/volcano-vgpu/vgpu-cdi-hook", Args: []string{"vgpu-cdi-hook", "preload"}}
	name, err := s.WriteLimiter("uid-1", "main", hook)
	if err != nil {
		t.Fatal(err)
	}
	if name != "volcano-vgpu.io/limiter=uid-1_main" {
		t.Errorf("name = %q", name)
	}
	raw := readSpecJSON(t, filepath.Join(s.Dir, "volcano-vgpu.io-limiter_uid-1_main.json"))
	want := map[string]any{
		"cdiVersion": "0.5.0", "kind": "volcano-vgpu.io/limiter",
		"devices": []any{map[string]any{"name": "uid-1_main", "containerEdits": map[string]any{"hooks": []any{
			map[string]any{"hookName": "createRuntime", "path": "/usr/local/volcano-vgpu/vgpu-cdi-hook", "args": []any{"vgpu-cdi-hook", "preload"}},
		}}}},
	}
	if d := cmp.Diff(want, raw); d != "" {
		t.Errorf("spec file (-want +got):\n%s", d)
	}
	if _, err := s.WriteLimiter("uid-1", "side", hook); err != nil {
		t.Fatal(err)
	}
	if _, err := s.WriteLimiter("uid-2", "main", hook); err != nil {
		t.Fatal(err)
	}
	pods, err := s.Pods()
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]string{"uid-1", "uid-2"}, pods); d != "" {
		t.Errorf("pods (-want +got):\n%s", d)
	}
	if err := s.Remove("uid-1"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Read("uid-1", "side"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("uid-1's spec after Remove: %v", err)
	}
	if sp, err := s.Read("uid-2", "main"); err != nil || sp.Devices[0].Name != "uid-2_main" {
		t.Errorf("uid-2's spec after removing uid-1: %+v, %v", sp, err)
	}
	if left, _ := filepath.Glob(filepath.Join(s.Dir, ".*")); len(left) != 0 {
		t.Errorf("temporary files left: %v", left)
	}
}

func TestWriteLimiterRefuses(t *testing.T) {
	s := Specs{Dir: t.TempDir()}
	for _, tc := range []struct {
		name, uid, container string
		hook                 Hook
	}{
		{"relative hook path", "uid-1", "main", Hook{HookName: CreateRuntime, Path: "vgpu-cdi-hook"}},
		{"no hook name", "uid-1", "main", Hook{Path: "/bin/true"}},
		{"pod UID with a slash", "../x", "main", Hook{HookName: CreateRuntime, Path: "/bin/true"}},
	} {
		if _, err := s.WriteLimiter(tc.uid, tc.container, tc.hook); err == nil {
			t.Errorf("%s: no error", tc.name)
		}
	}
	if err := s.Remove("*"); err == nil {
		t.Error("Remove(*) accepted a pattern")
	}
}

// readSpecJSON reads a written spec file as plain JSON (what a runtime parses).
func readSpecJSON(t *testing.T, path string) map[string]any {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var raw map[string]any
	if err := json.Unmarshal(b, &raw); err != nil {
		t.Fatal(err)
	}
	return raw
}

// checkErr fails the test unless err is what the case wants: with want
// set, an error wrapping sentinel whose text contains want (it returns
// true: nothing more to check); with want empty, no error.
func checkErr(t *testing.T, call string, err, sentinel error, want string) bool {
	t.Helper()
	if want != "" {
		if !errors.Is(err, sentinel) || !strings.Contains(err.Error(), want) {
			t.Fatalf("%s = %v, want %v saying %q", call, err, sentinel, want)
		}
		return true
	}
	if err != nil {
		t.Fatalf("%s: %v", call, err)
	}
	return false
}
