package main

import (
	"archive/tar"
	"bufio"
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// The images `make images` built are read from $VGPU_IMAGES (make
// images-test sets it); without it these tests skip.
func imagesDir(t *testing.T) string {
	t.Helper()
	d := os.Getenv("VGPU_IMAGES")
	if d == "" {
		t.Skip("VGPU_IMAGES is not set: make images && make images-test inspects the built images")
	}
	return d
}

// fsEntry is one path of an image's flattened file system.
type fsEntry struct {
	hdr  *tar.Header
	data []byte
}

type imageFS map[string]fsEntry

func flatten(t *testing.T, img v1.Image) imageFS {
	t.Helper()
	rc := mutate.Extract(img)
	defer rc.Close()
	out := imageFS{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		out["/"+strings.TrimSuffix(path.Clean(h.Name), "/")] = fsEntry{hdr: h, data: data}
	}
}

// resolve follows symbolic links inside the image (absolute or relative,
// in any component) and returns the regular file a path names.
func (f imageFS) resolve(p string) (string, fsEntry, error) {
	for hops := 0; hops < 16; hops++ {
		parts := strings.Split(strings.TrimPrefix(path.Clean(p), "/"), "/")
		cur := "/"
		redirected := false
		for i, part := range parts {
			next := path.Join(cur, part)
			e, ok := f[next]
			if !ok {
				return "", fsEntry{}, fmt.Errorf("%s: %s is not in the image", p, next)
			}
			if e.hdr.Typeflag == tar.TypeSymlink {
				target := e.hdr.Linkname
				if !path.IsAbs(target) {
					target = path.Join(cur, target)
				}
				p = path.Join(append([]string{target}, parts[i+1:]...)...)
				redirected = true
				break
			}
			cur = next
		}
		if !redirected {
			e := f[cur]
			if e.hdr.Typeflag != tar.TypeReg {
				return "", fsEntry{}, fmt.Errorf("%s is not a regular file", p)
			}
			return cur, e, nil
		}
	}
	return "", fsEntry{}, fmt.Errorf("%s: too many symbolic links", p)
}

type wantFile struct {
	path string
	mode int64
	uid  int
}

func TestImages(t *testing.T) {
	dir := imagesDir(t)
	tests := []struct {
		name       string
		entrypoint []string
		user       string
		files      []wantFile
		static     []string // ELF binaries with no interpreter
		dynamic    []string // ELF binaries whose loader and libraries the image must hold
		absent     []string
	}{
		{
			name:       "vc-scheduler",
			entrypoint: []string{"/usr/local/bin/vc-scheduler"},
			user:       "65532:65532",
			files: []wantFile{
				{path: "/usr/local/bin/vc-scheduler", mode: 0o755},
				{path: "/usr/local/bin/vgpu-admission", mode: 0o755}, // the chart runs it as the webhook's command
				{path: "/etc/passwd", mode: 0o644},
				{path: "/etc/ssl/certs/ca-certificates.crt", mode: 0o644},
				{path: "/tmp", mode: 0o1777},
				{path: "/home/nonroot", mode: 0o700, uid: 65532},
			},
			static: []string{"/usr/local/bin/vc-scheduler", "/usr/local/bin/vgpu-admission"},
			absent: []string{"/bin/sh", "/lib"},
		},
		{
			name:       "vgpu-device-plugin",
			entrypoint: []string{"/usr/local/bin/vgpu-device-plugin"},
			user:       "0:0",
			files: []wantFile{
				{path: "/usr/local/bin/vgpu-device-plugin", mode: 0o755},
				{path: "/opt/volcano-vgpu/libvcuda.so", mode: 0o644},
				{path: "/opt/volcano-vgpu/vgpu-cdi-hook", mode: 0o755}, // also the init step: vgpu-cdi-hook install
				{path: "/etc/ld.so.conf", mode: 0o644},
				{path: "/etc/ssl/certs/ca-certificates.crt", mode: 0o644},
				{path: "/tmp", mode: 0o1777},
				{path: "/usr/lib/" + triplet(), mode: 0o755}, // where the runtime mounts libnvidia-ml
			},
			static:  []string{"/opt/volcano-vgpu/vgpu-cdi-hook"}, // runs on the host, whatever its libc
			dynamic: []string{"/usr/local/bin/vgpu-device-plugin", "/opt/volcano-vgpu/libvcuda.so"},
			absent:  []string{"/bin/sh", "/usr/share/doc", "/usr/lib/x86_64-linux-gnu/gconv"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			img, err := tarball.ImageFromPath(filepath.Join(dir, tc.name+".tar"), nil)
			if err != nil {
				t.Fatalf("%v (make images writes it)", err)
			}
			cf, err := img.ConfigFile()
			if err != nil {
				t.Fatal(err)
			}
			if strings.Join(cf.Config.Entrypoint, " ") != strings.Join(tc.entrypoint, " ") || cf.Config.User != tc.user || cf.OS != "linux" {
				t.Errorf("entrypoint %q user %q os %q, want %q %q linux", cf.Config.Entrypoint, cf.Config.User, cf.OS, tc.entrypoint, tc.user)
			}
			fsys := flatten(t, img)
			for _, w := range tc.files {
				e, ok := fsys[w.path]
				if !ok {
					t.Errorf("%s is not in the image", w.path)
					continue
				}
				if e.hdr.Mode != w.mode || e.hdr.Uid != w.uid {
					t.Errorf("%s: mode %#o uid %d, want %#o uid %d", w.path, e.hdr.Mode, e.hdr.Uid, w.mode, w.uid)
				}
			}
			for _, p := range tc.absent {
				if _, ok := fsys[p]; ok {
					t.Errorf("%s is in the image; the image should not carry it", p)
				}
			}
			if !bytes.Contains(fsys["/etc/ssl/certs/ca-certificates.crt"].data, []byte("-----BEGIN CERTIFICATE-----")) {
				t.Error("/etc/ssl/certs/ca-certificates.crt holds no certificate")
			}
			if !strings.Contains(string(fsys["/etc/passwd"].data), ":65532:65532:") {
				t.Error("/etc/passwd has no user 65532")
			}
			for _, p := range tc.static {
				f := openELF(t, fsys, p)
				if interp := interpreter(t, f); interp != "" {
					t.Errorf("%s has the ELF interpreter %s; expected a static binary (CGO_ENABLED=0)", p, interp)
				}
			}
			for _, p := range tc.dynamic {
				checkDynamic(t, fsys, p)
			}
			checkDigests(t, dir, tc.name, img)
		})
	}
}

// triplet is the Debian multiarch directory of the test's architecture.
func triplet() string {
	if runtime.GOARCH == "arm64" {
		return "aarch64-linux-gnu"
	}
	return "x86_64-linux-gnu"
}

func openELF(t *testing.T, fsys imageFS, p string) *elf.File {
	t.Helper()
	_, e, err := fsys.resolve(p)
	if err != nil {
		t.Fatal(err)
	}
	f, err := elf.NewFile(bytes.NewReader(e.data))
	if err != nil {
		t.Fatalf("%s: %v", p, err)
	}
	return f
}

func interpreter(t *testing.T, f *elf.File) string {
	t.Helper()
	for _, prog := range f.Progs {
		if prog.Type == elf.PT_INTERP {
			b, err := io.ReadAll(prog.Open())
			if err != nil {
				t.Fatal(err)
			}
			return strings.TrimRight(string(b), "\x00")
		}
	}
	return ""
}

// checkDynamic: the binary's ELF interpreter (an executable) is in the
// image; each library it needs is in a directory the loader searches; each
// glibc symbol version it needs is defined by the library it needs it from.
// libvcuda.so is loaded into other images: it also keeps to its glibc floor.
func checkDynamic(t *testing.T, fsys imageFS, p string) {
	f := openELF(t, fsys, p)
	if interp := interpreter(t, f); interp != "" {
		if _, _, err := fsys.resolve(interp); err != nil {
			t.Errorf("%s: its ELF interpreter: %v", p, err)
		}
	} else if f.Type == elf.ET_EXEC {
		t.Errorf("%s has no ELF interpreter; expected a dynamically linked (cgo) binary", p)
	}
	dirs := searchDirs(fsys)
	needs, err := f.DynamicVersionNeeds()
	if err != nil {
		t.Fatalf("%s: %v", p, err)
	}
	versions := map[string][]string{}
	for _, n := range needs {
		for _, d := range n.Needs {
			versions[n.Name] = append(versions[n.Name], d.Dep)
		}
	}
	libs, err := f.ImportedLibraries()
	if err != nil {
		t.Fatal(err)
	}
	if len(libs) == 0 {
		t.Errorf("%s needs no library; expected at least libc.so.6", p)
	}
	for _, lib := range libs {
		var found *elf.File
		for _, d := range dirs {
			if _, e, err := fsys.resolve(path.Join(d, lib)); err == nil {
				found, err = elf.NewFile(bytes.NewReader(e.data))
				if err != nil {
					t.Fatalf("%s: %v", path.Join(d, lib), err)
				}
				break
			}
		}
		if found == nil {
			t.Errorf("%s needs %s, which is in none of the loader's directories %v", p, lib, dirs)
			continue
		}
		defs, err := found.DynamicVersions()
		if err != nil {
			t.Fatalf("%s: %v", lib, err)
		}
		defined := map[string]bool{}
		for _, d := range defs {
			defined[d.Name] = true
		}
		for _, v := range versions[lib] {
			if !defined[v] {
				t.Errorf("%s needs %s from %s, which the image's %s does not define (ship a newer libc6: LIBC6_VERSION)", p, v, lib, lib)
			}
		}
	}
	if path.Base(p) == "libvcuda.so" {
		floor := glibcFloor(t)
		for lib, vs := range versions {
			for _, v := range vs {
				if ver, ok := strings.CutPrefix(v, "GLIBC_"); ok && newerVersion(ver, floor) {
					t.Errorf("libvcuda.so needs %s from %s, newer than its glibc floor %s (vcuda/src/glibc_floor.h)", v, lib, floor)
				}
			}
		}
	}
}

// searchDirs are the loader's default directories for the image's
// architecture plus those ld.so.conf.d names.
func searchDirs(fsys imageFS) []string {
	dirs := []string{"/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib/aarch64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/lib64", "/usr/lib64", "/lib", "/usr/lib"}
	for p, e := range fsys {
		if strings.HasPrefix(p, "/etc/ld.so.conf.d/") && strings.HasSuffix(p, ".conf") {
			sc := bufio.NewScanner(bytes.NewReader(e.data))
			for sc.Scan() {
				if l := strings.TrimSpace(sc.Text()); strings.HasPrefix(l, "/") {
					dirs = append(dirs, l)
				}
			}
		}
	}
	return dirs
}

func glibcFloor(t *testing.T) string {
	t.Helper()
	h, err := os.ReadFile("../../vcuda/src/glibc_floor.h")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`#define VC_GLIBC_FLOOR "([0-9.]+)"`).FindSubmatch(h)
	if m == nil {
		t.Fatal("vcuda/src/glibc_floor.h defines no VC_GLIBC_FLOOR")
	}
	return string(m[1])
}

// newerVersion reports whether dotted version a is newer than b.
func newerVersion(a, b string) bool {
	as, bs := strings.Split(a, "."), strings.Split(b, ".")
	for i := 0; i < max(len(as), len(bs)); i++ {
		var x, y int
		if i < len(as) {
			x, _ = strconv.Atoi(as[i])
		}
		if i < len(bs) {
			y, _ = strconv.Atoi(bs[i])
		}
		if x != y {
			return x > y
		}
	}
	return false
}

// checkDigests: the tarball, the OCI layout and images.txt agree on the
// image's digest.
func checkDigests(t *testing.T, dir, imgName string, img v1.Image) {
	want, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	p, err := layout.FromPath(filepath.Join(dir, "oci", imgName))
	if err != nil {
		t.Fatal(err)
	}
	idx, err := p.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	m, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Manifests) != 1 || m.Manifests[0].Digest != want {
		t.Errorf("oci/%s holds %v, want the one image %s of %s.tar", imgName, m.Manifests, want, imgName)
	}
	list, err := os.ReadFile(filepath.Join(dir, "images.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`/` + regexp.QuoteMeta(imgName) + `:\S+ ` + regexp.QuoteMeta(want.String()) + ` `).Match(list) {
		t.Errorf("images.txt does not list %s with digest %s:\n%s", imgName, want, list)
	}
}

func TestNewerVersion(t *testing.T) {
	tests := []struct {
		name string
		a, b string
		want bool
	}{
		{name: "minor above", a: "2.34", b: "2.28", want: true},
		{name: "equal", a: "2.28", b: "2.28", want: false},
		{name: "patch level of an older minor", a: "2.2.5", b: "2.28", want: false},
		{name: "longer but newer", a: "2.28.1", b: "2.28", want: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := newerVersion(tc.a, tc.b); got != tc.want {
				t.Errorf("newerVersion(%s, %s) = %v, want %v", tc.a, tc.b, got, tc.want)
			}
		})
	}
}
