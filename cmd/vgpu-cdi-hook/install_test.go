package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestInstall: both files land in --to with their modes, replacing what was
// there; a missing source or target is an error that names it.
func TestInstall(t *testing.T) {
	tests := []struct {
		name    string
		noLib   bool   // the image directory lacks libvcuda.so
		noTo    bool   // the host directory is not mounted
		old     string // an older libvcuda.so already on the host
		args    func(from, to string) []string
		wantErr string
	}{
		{name: "fresh host", args: flags},
		{name: "replaces an older copy", old: "old limiter", args: flags},
		{name: "source missing", noLib: true, args: flags, wantErr: "libvcuda.so"},
		{name: "target missing", noTo: true, args: flags, wantErr: "is not a directory"},
		{name: "relative --to", args: func(from, _ string) []string { return []string{"--from=" + from, "--to=host"} }, wantErr: "--to: expected an absolute directory"},
		{name: "extra argument", args: func(from, to string) []string { return append(flags(from, to), "x") }, wantErr: "unexpected arguments"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := t.TempDir()
			from, to := filepath.Join(d, "image"), filepath.Join(d, "host")
			mkdir(t, from)
			if !tc.noTo {
				mkdir(t, to)
			}
			if !tc.noLib {
				write(t, filepath.Join(from, "libvcuda.so"), "limiter", 0o600)
			}
			write(t, filepath.Join(from, "vgpu-cdi-hook"), "hook", 0o600)
			if tc.old != "" {
				write(t, filepath.Join(to, "libvcuda.so"), tc.old, 0o755)
			}
			err := run(append([]string{installSubcommand}, tc.args(from, to)...), strings.NewReader(""))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for name, want := range map[string]struct {
				data string
				mode os.FileMode
			}{"libvcuda.so": {"limiter", 0o644}, "vgpu-cdi-hook": {"hook", 0o755}} {
				p := filepath.Join(to, name)
				st, err := os.Stat(p)
				if err != nil {
					t.Fatal(err)
				}
				got, _ := os.ReadFile(p)
				if string(got) != want.data || st.Mode().Perm() != want.mode {
					t.Errorf("%s = %q mode %v, want %q mode %v", name, got, st.Mode().Perm(), want.data, want.mode)
				}
			}
			left, _ := os.ReadDir(to)
			if len(left) != 2 {
				t.Errorf("host directory holds %d entries, want 2 (no temporary files left)", len(left))
			}
		})
	}
}

func flags(from, to string) []string { return []string{"--from=" + from, "--to=" + to} }

func mkdir(t *testing.T, dir string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
}

func write(t *testing.T, path, data string, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), mode); err != nil {
		t.Fatal(err)
	}
}
