package preloadhook

import (
	"debug/elf"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"
)

// hostELF returns a host executable with (dynamic) or without (static) an
// interpreter, or skips.
func hostELF(t *testing.T, dynamic bool) string {
	t.Helper()
	candidates := []string{"/bin/true", "/usr/bin/true"}
	if !dynamic {
		exe, err := os.Executable() // a Go test binary without cgo is static
		if err != nil {
			t.Skip(err)
		}
		candidates = []string{exe}
	}
	for _, c := range candidates {
		e, err := elf.Open(c)
		if err != nil {
			continue
		}
		has := false
		for _, p := range e.Progs {
			has = has || p.Type == elf.PT_INTERP
		}
		e.Close()
		if has == dynamic {
			return c
		}
	}
	t.Skipf("no host executable with interpreter=%t", dynamic)
	return ""
}

type image map[string]string // path in the image → host file to copy, "" for an empty file, "->x" for a link to x

func (im image) build(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	for p, src := range im {
		dst := filepath.Join(root, p)
		must(t, os.MkdirAll(filepath.Dir(dst), 0o755))
		switch {
		case len(src) > 2 && src[:2] == "->":
			must(t, os.Symlink(src[2:], dst))
		case src == "|fifo":
			must(t, unix.Mkfifo(dst, 0o644))
		case src == "":
			must(t, os.WriteFile(dst, nil, 0o755))
		case src[0] == '#':
			must(t, os.WriteFile(dst, []byte(src), 0o755))
		default:
			b, err := os.ReadFile(src)
			must(t, err)
			must(t, os.WriteFile(dst, b, 0o755))
		}
	}
	return root
}

func TestInspect(t *testing.T) {
	if _, err := openInRoot(unix.AT_FDCWD, "/", unix.O_PATH); errors.Is(err, unix.ENOSYS) {
		t.Skip("no openat2 on this kernel: Inspect says unknown")
	}
	dyn, static := hostELF(t, true), hostELF(t, false)
	glibc := "lib64/ld-linux-x86-64.so.2"
	for _, tc := range []struct {
		name  string
		image image
		proc  process
		want  Report
	}{
		{name: "glibc image, dynamic entrypoint by absolute path",
			image: image{glibc: "", "usr/bin/app": dyn}, proc: process{Args: []string{"/usr/bin/app"}},
			want: Report{Libc: "glibc", Entrypoint: "/usr/bin/app", Linking: LinkDynamic}},
		{name: "entrypoint found on the process's PATH",
			image: image{glibc: "", "opt/bin/app": dyn}, proc: process{Args: []string{"app"}, Env: []string{"PATH=/usr/bin:/opt/bin"}},
			want: Report{Libc: "glibc", Entrypoint: "/opt/bin/app", Linking: LinkDynamic}},
		{name: "static entrypoint: unlimited",
			image: image{glibc: "", "app": static}, proc: process{Args: []string{"/app"}},
			want: Report{Libc: "glibc", Entrypoint: "/app", Linking: LinkStatic, Unlimited: UnlimitedStatic}},
		{name: "musl image: unlimited",
			image: image{"lib/ld-musl-x86_64.so.1": "", "bin/sh": "#!/bin/busybox\n"}, proc: process{Args: []string{"/bin/sh"}},
			want: Report{Libc: "musl", Entrypoint: "/bin/sh", Linking: LinkScript, Unlimited: UnlimitedMusl}},
		{name: "script whose interpreter is static",
			image: image{glibc: "", "entry.sh": "#!/bin/static -x\necho\n", "bin/static": static}, proc: process{Args: []string{"/entry.sh"}},
			want: Report{Libc: "glibc", Entrypoint: "/entry.sh", Linking: LinkStatic, Unlimited: UnlimitedStatic}},
		{name: "link to a host path resolves inside the image",
			image: image{glibc: "", "usr/bin/app": "->" + static}, proc: process{Args: []string{"/usr/bin/app"}},
			want: Report{Libc: "glibc", Entrypoint: "/usr/bin/app", Linking: LinkUnknown}},
		{name: "relative link inside the image is followed",
			image: image{glibc: "", "usr/bin/python3.11": dyn, "usr/bin/python3": "->python3.11"}, proc: process{Args: []string{"python3"}, Env: []string{"PATH=/usr/bin"}},
			want: Report{Libc: "glibc", Entrypoint: "/usr/bin/python3", Linking: LinkDynamic}},
		{name: "a FIFO entrypoint is not opened",
			image: image{glibc: "", "app": "|fifo"}, proc: process{Args: []string{"/app"}},
			want: Report{Libc: "glibc", Entrypoint: "/app", Linking: LinkUnknown}},
		{name: "no entrypoint, no loader",
			image: image{}, proc: process{},
			want: Report{Libc: "unknown", Linking: LinkUnknown}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Inspect(tc.image.build(t), tc.proc)
			tc.want.Version = ReportVersion
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("report (-want +got):\n%s", d)
			}
		})
	}
}

func TestReportRoundTrip(t *testing.T) {
	dir := t.TempDir()
	if _, err := ReadReport(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("no report: err = %v", err)
	}
	want := Report{Version: ReportVersion, Libc: "musl", Linking: LinkScript, Unlimited: UnlimitedMusl, KeptEntries: 2}
	must(t, WriteReport(filepath.Join(dir, "ld.so.preload"), want))
	got, err := ReadReport(dir)
	must(t, err)
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("report (-want +got):\n%s", d)
	}
	must(t, os.WriteFile(filepath.Join(dir, ReportFile), []byte(`{"version":"v2"}`), 0o644))
	if _, err := ReadReport(dir); err == nil {
		t.Error("a v2 report was accepted")
	}
	if msg := want.Message("main"); msg == "" {
		t.Error("no message for an unlimited container")
	}
}
