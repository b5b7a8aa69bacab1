package preloadhook

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"
)

const lib = "/usr/local/volcano-vgpu/libvcuda.so"

func TestMerge(t *testing.T) {
	for _, tc := range []struct {
		name, image, want string
	}{
		{name: "no file in the image", image: "", want: lib + "\n"},
		{name: "the image's entries follow ours", image: "/usr/lib/libjemalloc.so\n",
			want: lib + "\n# kept from the image's /etc/ld.so.preload:\n/usr/lib/libjemalloc.so\n"},
		{name: "separators and comments as glibc reads them", image: "# tuned\n/a.so:/b.so\t/c.so # trailing\n\n",
			want: lib + "\n# kept from the image's /etc/ld.so.preload:\n/a.so\n/b.so\n/c.so\n"},
		{name: "ours is not repeated, theirs once each", image: "/a.so " + lib + " /a.so\n",
			want: lib + "\n# kept from the image's /etc/ld.so.preload:\n/a.so\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, _, err := Merge(lib, []byte(tc.image))
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tc.want, string(got)); d != "" {
				t.Errorf("merged (-want +got):\n%s", d)
			}
		})
	}
	if _, _, err := Merge(lib, []byte("/a.so\x00")); !errors.Is(err, ErrImagePreload) {
		t.Errorf("NUL byte: err = %v", err)
	}
	if _, _, err := Merge(lib, []byte("/"+strings.Repeat("a", 5000))); !errors.Is(err, ErrImagePreload) {
		t.Errorf("overlong entry: err = %v", err)
	}
}

// bundle is a fake OCI bundle: config.json, a root file system laid out by
// the test, the OCI state on stdin, and the plugin's preload file.
type bundle struct {
	dir, root, preload string
	host               string // a file outside the container the image must not reach
}

func newBundle(t *testing.T, rootPath string) bundle {
	t.Helper()
	d := t.TempDir()
	b := bundle{dir: filepath.Join(d, "bundle"), preload: filepath.Join(d, "state", "ld.so.preload"), host: filepath.Join(d, "host-secret")}
	b.root = filepath.Join(b.dir, "rootfs")
	if filepath.IsAbs(rootPath) {
		b.root = rootPath
	}
	must(t, os.MkdirAll(b.dir, 0o755))
	must(t, os.MkdirAll(b.root, 0o755))
	must(t, os.MkdirAll(filepath.Dir(b.preload), 0o755))
	must(t, os.WriteFile(b.preload, []byte(lib+"\n"), 0o644))
	must(t, os.WriteFile(b.host, []byte("/host/evil.so\n"), 0o600))
	must(t, os.WriteFile(filepath.Join(b.dir, "config.json"), []byte(`{"ociVersion":"1.2.0","root":{"path":"`+rootPath+`","readonly":false},"process":{"args":["sh"]}}`), 0o644))
	return b
}

func (b bundle) stdin() *strings.Reader {
	return strings.NewReader(`{"ociVersion":"1.2.0","id":"c1","status":"creating","pid":42,"bundle":"` + b.dir + `"}`)
}

func (b bundle) args() Args { return Args{File: b.preload, Library: lib} }

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestRun(t *testing.T) {
	for _, tc := range []struct {
		name    string
		rootArg string // root.path in config.json
		image   func(t *testing.T, b bundle)
		want    string // the container's preload file afterwards
		wantErr string
	}{
		{name: "image without the file", rootArg: "rootfs", image: func(t *testing.T, b bundle) {
			must(t, os.MkdirAll(filepath.Join(b.root, "etc"), 0o755))
		}, want: lib + "\n"},
		{name: "image without /etc", rootArg: "rootfs", image: func(t *testing.T, b bundle) {}, want: lib + "\n"},
		{name: "image's entries kept after ours", rootArg: "rootfs", image: func(t *testing.T, b bundle) {
			must(t, os.MkdirAll(filepath.Join(b.root, "etc"), 0o755))
			must(t, os.WriteFile(filepath.Join(b.root, "etc", "ld.so.preload"), []byte("/usr/lib/libtcmalloc.so\n"), 0o644))
		}, want: lib + "\n# kept from the image's /etc/ld.so.preload:\n/usr/lib/libtcmalloc.so\n"},
		{name: "empty mount point the runtime created", rootArg: "rootfs", image: func(t *testing.T, b bundle) {
			must(t, os.MkdirAll(filepath.Join(b.root, "etc"), 0o755))
			must(t, os.WriteFile(filepath.Join(b.root, "etc", "ld.so.preload"), nil, 0o644))
		}, want: lib + "\n"},
		{name: "absolute root path (CRI-O)", rootArg: "ABS", image: func(t *testing.T, b bundle) {
			must(t, os.MkdirAll(filepath.Join(b.root, "etc"), 0o755))
			must(t, os.WriteFile(filepath.Join(b.root, "etc", "ld.so.preload"), []byte("/x.so"), 0o644))
		}, want: lib + "\n# kept from the image's /etc/ld.so.preload:\n/x.so\n"},
		{name: "file is a link to a host file: refused, host file unread", rootArg: "rootfs", image: func(t *testing.T, b bundle) {
			must(t, os.MkdirAll(filepath.Join(b.root, "etc"), 0o755))
			must(t, os.Symlink(b.host, filepath.Join(b.root, "etc", "ld.so.preload")))
		}, want: lib + "\n", wantErr: "ld.so.preload in the image is a symbolic link"},
		{name: "/etc is a link to a host directory: refused", rootArg: "rootfs", image: func(t *testing.T, b bundle) {
			hostEtc := filepath.Join(filepath.Dir(b.host), "host-etc")
			must(t, os.MkdirAll(hostEtc, 0o755))
			must(t, os.WriteFile(filepath.Join(hostEtc, "ld.so.preload"), []byte("/host/evil.so"), 0o644))
			must(t, os.Symlink(hostEtc, filepath.Join(b.root, "etc")))
		}, want: lib + "\n", wantErr: "etc in the image is a symbolic link"},
		{name: "a FIFO does not block the hook", rootArg: "rootfs", image: func(t *testing.T, b bundle) {
			must(t, os.MkdirAll(filepath.Join(b.root, "etc"), 0o755))
			must(t, syscall.Mkfifo(filepath.Join(b.root, "etc", "ld.so.preload"), 0o644))
		}, want: lib + "\n", wantErr: "not a regular file"},
		{name: "oversized file refused", rootArg: "rootfs", image: func(t *testing.T, b bundle) {
			must(t, os.MkdirAll(filepath.Join(b.root, "etc"), 0o755))
			must(t, os.WriteFile(filepath.Join(b.root, "etc", "ld.so.preload"), []byte(strings.Repeat("/a.so\n", MaxImageFile/4)), 0o644))
		}, want: lib + "\n", wantErr: "more than 65536"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rootArg := tc.rootArg
			if rootArg == "ABS" {
				rootArg = filepath.Join(t.TempDir(), "merged")
			}
			b := newBundle(t, rootArg)
			tc.image(t, b)
			before := inode(t, b.preload)
			err := Run(b.stdin(), b.args())
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("err = %v, want %q", err, tc.wantErr)
			}
			got, err := os.ReadFile(b.preload)
			must(t, err)
			if d := cmp.Diff(tc.want, string(got)); d != "" {
				t.Errorf("container preload file (-want +got):\n%s", d)
			}
			if rep, err := ReadReport(filepath.Dir(b.preload)); (err == nil) != (tc.wantErr == "") || err == nil && rep.KeptEntries != strings.Count(tc.want, "\n")-1-min(1, strings.Count(tc.want, "#")) {
				t.Errorf("image report = %+v, %v (want one exactly when the hook succeeds)", rep, err)
			}
			if after := inode(t, b.preload); after != before {
				t.Errorf("preload file replaced (inode %d -> %d): the container's bind mount would keep the old one", before, after)
			}
		})
	}
}

func inode(t *testing.T, p string) uint64 {
	t.Helper()
	st, err := os.Stat(p)
	must(t, err)
	return st.Sys().(*syscall.Stat_t).Ino
}

func TestRunRefusesBadInput(t *testing.T) {
	b := newBundle(t, "rootfs")
	link := filepath.Join(filepath.Dir(b.preload), "link", "ld.so.preload")
	must(t, os.MkdirAll(filepath.Dir(link), 0o755))
	must(t, os.Symlink(b.host, link))
	for _, tc := range []struct {
		name    string
		stdin   string
		args    Args
		wantErr string
	}{
		{"relative file", "", Args{File: "state/ld.so.preload", Library: lib}, "--file"},
		{"file not named ld.so.preload", "", Args{File: b.host, Library: lib}, "--file"},
		{"library with a separator", "", Args{File: b.preload, Library: "/a.so:/b.so"}, "--library"},
		{"no state", "", b.args(), "OCI state on stdin"},
		{"relative bundle", `{"bundle":"bundle"}`, b.args(), "not an absolute path"},
		{"preload file is a link: the host file is not written", `{"bundle":"` + b.dir + `"}`, Args{File: link, Library: lib}, "container preload file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Run(strings.NewReader(tc.stdin), tc.args)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("err = %v, want %q", err, tc.wantErr)
			}
		})
	}
	if got, _ := os.ReadFile(b.host); string(got) != "/host/evil.so\n" {
		t.Errorf("host file changed: %q", got)
	}
}

// FuzzMerge: whatever the image's file holds, Merge refuses it with
// ErrImagePreload or writes the library first, then every entry of the
// image's file once, and its output reads back as exactly that list.
func FuzzMerge(f *testing.F) {
	for _, s := range []string{"", "/a.so\n", "# c\n/a.so:/b.so\t/c.so #x\n", lib + " /a.so /a.so", "/a.so\x00", ":::\n\n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, image []byte) {
		out, kept, err := Merge(lib, image)
		if err != nil {
			if !errors.Is(err, ErrImagePreload) {
				t.Fatalf("error %v is not ErrImagePreload", err)
			}
			return
		}
		in, _ := Entries(image)
		got, err := Entries(out)
		if err != nil {
			t.Fatalf("merged file does not parse: %v", err)
		}
		want := []string{lib}
		for _, e := range in {
			if !slices.Contains(want, e) {
				want = append(want, e)
			}
		}
		if !slices.Equal(got, want) || kept != len(want)-1 {
			t.Fatalf("merged %q (kept %d) reads %q, want %q", out, kept, got, want)
		}
	})
}
