package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestDescendants(t *testing.T) {
	// 100 unshare (tenant a) -> 101 python -> 102 a thread-spawned helper
	// 200 unshare (tenant b) -> 201 probe; 300 a host process of its own
	parent := map[int]int{1: 0, 100: 1, 101: 100, 102: 101, 200: 1, 201: 200, 300: 1}
	got := descendants(parent, map[int]string{100: "a", 200: "b"})
	want := map[int]string{100: "a", 101: "a", 102: "a", 200: "b", 201: "b"}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("owners (-want +got):\n%s", d)
	}
}

func TestDescendantsSurvivesALoop(t *testing.T) {
	// a torn read of /proc can make a cycle; the walk must end
	got := descendants(map[int]int{5: 6, 6: 5}, map[int]string{9: "a"})
	if d := cmp.Diff(map[int]string{9: "a"}, got); d != "" {
		t.Errorf("owners (-want +got):\n%s", d)
	}
}

func TestParseStatPPID(t *testing.T) {
	for _, tc := range []struct {
		name string
		stat string
		want int
		ok   bool
	}{
		{"plain", "101 (python3) S 100 101 100 0 -1", 100, true},
		{"comm with spaces and parentheses", "102 (pt (main) x) R 101 102", 101, true},
		{"truncated", "103 (probe)", 0, false},
		{"no comm", "garbage", 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := parseStatPPID([]byte(tc.stat))
			if got != tc.want || ok != tc.ok {
				t.Errorf("parseStatPPID(%q) = %d, %v; want %d, %v", tc.stat, got, ok, tc.want, tc.ok)
			}
		})
	}
}

func TestOwnersOfAProcTree(t *testing.T) {
	proc := t.TempDir()
	for pid, stat := range map[string]string{
		"100": "100 (unshare) S 1 100", "101": "101 (python3) S 100 101", "300": "300 (sshd) S 1 300",
	} {
		if err := os.MkdirAll(filepath.Join(proc, pid), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(proc, pid, "stat"), []byte(stat), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(filepath.Join(proc, "self"), 0o755); err != nil { // not a pid: ignored
		t.Fatal(err)
	}
	got, err := ownersOf(proc, map[int]string{100: "gpu-check-1"})
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(map[int]string{100: "gpu-check-1", 101: "gpu-check-1"}, got); d != "" {
		t.Errorf("owners (-want +got):\n%s", d)
	}
	if _, err := ownersOf(filepath.Join(proc, "missing"), nil); err == nil {
		t.Error("ownersOf a missing /proc: no error")
	}
}
