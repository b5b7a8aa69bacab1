package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/preloadhook"
)

// TestArgvRoundTrip: the command line the plugin puts in its CDI spec is
// the one this binary parses.
func TestArgvRoundTrip(t *testing.T) {
	d := t.TempDir()
	bundle := filepath.Join(d, "bundle")
	for _, dir := range []string{filepath.Join(bundle, "rootfs", "etc"), filepath.Join(d, "state")} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(bundle, "config.json"), []byte(`{"root":{"path":"rootfs"}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bundle, "rootfs", "etc", "ld.so.preload"), []byte("/lib/libmine.so\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(d, "state", "ld.so.preload")
	if err := os.WriteFile(file, []byte("/v/libvcuda.so\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	argv := preloadhook.Argv(preloadhook.Args{File: file, Library: "/v/libvcuda.so"})
	if err := run(argv[1:], strings.NewReader(`{"bundle":"`+bundle+`"}`)); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(file)
	if want := "/v/libvcuda.so\n# kept from the image's /etc/ld.so.preload:\n/lib/libmine.so\n"; string(got) != want {
		t.Errorf("preload file = %q, want %q", got, want)
	}
	for _, bad := range [][]string{nil, {"mounts"}, {"preload", "--file=" + file, "extra"}, {"preload", "--unknown=1"}} {
		if err := run(bad, strings.NewReader("{}")); err == nil {
			t.Errorf("run(%q): no error", bad)
		}
	}
}
