package containeremu

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestResolveIn(t *testing.T) {
	root := t.TempDir()
	for _, d := range []string{"run", "usr/lib", "etc"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for link, target := range map[string]string{
		"var/run": "/run",        // absolute: inside root, never the host's /run
		"lib":     "usr/lib",     // relative
		"etc/up":  "../../../..", // climbs past root: stops at root
		"loop":    "loop",
	} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(root, link)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, filepath.Join(root, link)); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct{ in, want string }{
		{"/var/run/vcuda", "/run/vcuda"},
		{"/lib/x/libvcuda.so", "/usr/lib/x/libvcuda.so"},
		{"/etc/up/etc/ld.so.preload", "/etc/ld.so.preload"},
		{"/../../etc/vcuda/vcuda.config", "/etc/vcuda/vcuda.config"},
		{"/new/dir/./file", "/new/dir/file"},
		{"/", ""},
	} {
		got, err := resolveIn(root, tc.in)
		if err != nil {
			t.Errorf("%s: %v", tc.in, err)
			continue
		}
		if want := root + tc.want; got != want {
			t.Errorf("resolveIn(%s) = %s, want %s", tc.in, got, want)
		}
	}
	if _, err := resolveIn(root, "/loop/x"); err == nil || !strings.Contains(err.Error(), "too many levels") {
		t.Errorf("symlink loop: error %v", err)
	}
}
