package main

import (
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"

	"github.com/volcano-vgpu/volcano-vgpu/installer/imagebuild/layer"
)

// The paths the images put things at. The chart runs the scheduler image's
// vgpu-admission by path and the device plugin's init container copies the
// limiter directory to the host.
const (
	binDir     = "/usr/local/bin"
	limiterDir = "/opt/volcano-vgpu"
	nonrootUID = 65532
)

// Inputs are the files the images are made of: binaries built by make
// images, and Debian packages' data (dpkg-deb --fsys-tarfile).
type Inputs struct {
	// Bin holds vc-scheduler, vgpu-admission (static), vgpu-device-plugin
	// (cgo), vgpu-cdi-hook (static) and libvcuda.so.
	Bin string
	// Libc6 is the data tar of Debian's libc6, LibcVersion its version: the
	// glibc the device plugin was linked against, or a newer one.
	Libc6, Libc6Version string
	// CACerts is the data tar of Debian's ca-certificates.
	CACerts, CACertsVersion string
}

// imageSpec is one image: its layers, bottom first, and how it starts.
type imageSpec struct {
	name       string
	entrypoint []string
	user       string
	labels     map[string]string
	layers     []layerSpec
}

type layerSpec struct {
	name    string // recorded in the image's history
	entries []layer.Entry
}

// specs reads the inputs and describes both images.
func specs(in Inputs) ([]imageSpec, error) {
	certs, err := caBundle(in.CACerts)
	if err != nil {
		return nil, err
	}
	glibc, err := glibcEntries(in.Libc6)
	if err != nil {
		return nil, err
	}
	bin := func(name string, mode fs.FileMode, dst string) (layer.Entry, error) {
		data, err := os.ReadFile(filepath.Join(in.Bin, name))
		if err != nil {
			return layer.Entry{}, fmt.Errorf("%w (make images builds it into %s)", err, in.Bin)
		}
		return layer.Entry{Path: path.Join(dst, name), Data: data, Mode: mode}, nil
	}
	var scheduler, plugin []layer.Entry
	for _, b := range []struct {
		into *[]layer.Entry
		name string
		mode fs.FileMode
		dir  string
	}{
		{&scheduler, "vc-scheduler", 0o755, binDir},
		{&scheduler, "vgpu-admission", 0o755, binDir},
		{&plugin, "vgpu-device-plugin", 0o755, binDir},
		{&plugin, "libvcuda.so", 0o644, limiterDir},
		{&plugin, "vgpu-cdi-hook", 0o755, limiterDir},
	} {
		e, err := bin(b.name, b.mode, b.dir)
		if err != nil {
			return nil, err
		}
		*b.into = append(*b.into, e)
	}
	base := baseEntries(certs)
	return []imageSpec{
		{
			name:       "vc-scheduler",
			entrypoint: []string{binDir + "/vc-scheduler"},
			user:       fmt.Sprintf("%d:%d", nonrootUID, nonrootUID),
			labels: map[string]string{
				"org.opencontainers.image.title":       "vc-scheduler",
				"org.opencontainers.image.description": "Volcano's scheduler with the vgpu plugin, and the vgpu-admission webhook",
				"volcano-vgpu.io/debian-packages":      "ca-certificates=" + in.CACertsVersion,
			},
			layers: []layerSpec{
				{name: "base: passwd, group, CA certificates, /tmp", entries: base},
				{name: "vc-scheduler and vgpu-admission (static)", entries: scheduler},
			},
		},
		{
			name:       "vgpu-device-plugin",
			entrypoint: []string{binDir + "/vgpu-device-plugin"},
			user:       "0:0", // writes into kubelet's root-owned device-plugins directory
			labels: map[string]string{
				"org.opencontainers.image.title":       "vgpu-device-plugin",
				"org.opencontainers.image.description": "The vgpu device plugin, with libvcuda.so and vgpu-cdi-hook in " + limiterDir,
				"volcano-vgpu.io/debian-packages":      "ca-certificates=" + in.CACertsVersion + " libc6=" + in.Libc6Version,
			},
			layers: []layerSpec{
				{name: "base: passwd, group, CA certificates, /tmp", entries: base},
				{name: "glibc (Debian libc6 " + in.Libc6Version + ", libraries only)", entries: glibc},
				{name: "vgpu-device-plugin (cgo), libvcuda.so and vgpu-cdi-hook", entries: plugin},
			},
		},
	}, nil
}

// baseEntries are the few files a program expects of a system: users, CA
// certificates, a writable /tmp.
func baseEntries(certs []byte) []layer.Entry {
	return []layer.Entry{
		{Path: "/etc/passwd", Data: []byte("root:x:0:0:root:/root:/sbin/nologin\n" +
			fmt.Sprintf("nonroot:x:%d:%d:nonroot:/home/nonroot:/sbin/nologin\n", nonrootUID, nonrootUID))},
		{Path: "/etc/group", Data: []byte("root:x:0:\n" + fmt.Sprintf("nonroot:x:%d:\n", nonrootUID))},
		{Path: "/etc/nsswitch.conf", Data: []byte("hosts: files dns\n")},
		{Path: "/etc/ssl/certs/ca-certificates.crt", Data: certs},
		{Path: "/root", Type: layer.Dir, Mode: 0o700},
		{Path: "/home/nonroot", Type: layer.Dir, Mode: 0o700, UID: nonrootUID, GID: nonrootUID},
		{Path: "/tmp", Type: layer.Dir, Mode: 0o777 | fs.ModeSticky},
	}
}

// caBundle is what update-ca-certificates makes of Debian's ca-certificates
// with its default configuration: every certificate under
// /usr/share/ca-certificates, concatenated in path order.
func caBundle(dataTar string) ([]byte, error) {
	entries, err := readTar(dataTar, func(p string) bool {
		return strings.HasPrefix(p, "usr/share/ca-certificates/") && strings.HasSuffix(p, ".crt")
	})
	if err != nil {
		return nil, err
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].Path < entries[j].Path })
	var b bytes.Buffer
	for _, e := range entries {
		if e.Type != layer.File {
			continue
		}
		b.Write(e.Data)
		if !bytes.HasSuffix(e.Data, []byte("\n")) {
			b.WriteByte('\n')
		}
	}
	if b.Len() == 0 {
		return nil, fmt.Errorf("%s holds no certificate under /usr/share/ca-certificates: expected the data of Debian's ca-certificates package (dpkg-deb --fsys-tarfile)", dataTar)
	}
	return b.Bytes(), nil
}

// glibcEntries are libc6's libraries and loader (lib/<triplet>, lib64 on
// amd64) and its ld.so.conf.d, without gconv modules, locales or docs: what
// a cgo binary and the NVIDIA libraries the container runtime mounts next to
// it load. ld.so.conf is added so the runtime's ldconfig hook finds the
// directories it configures.
func glibcEntries(dataTar string) ([]layer.Entry, error) {
	entries, err := readTar(dataTar, func(p string) bool {
		return (strings.HasPrefix(p, "lib/") && !strings.Contains(p, "/gconv")) ||
			strings.HasPrefix(p, "lib64/") || strings.HasPrefix(p, "etc/ld.so.conf.d")
	})
	if err != nil {
		return nil, err
	}
	loader := false
	var usrLib []layer.Entry
	for _, e := range entries {
		if strings.HasPrefix(path.Base(e.Path), "ld-linux") {
			loader = true
		}
		// The container runtime mounts the NVIDIA libraries into
		// /usr/lib/<triplet>, a directory the loader searches by default.
		if e.Type == layer.Dir && path.Dir(e.Path) == "lib" && strings.Contains(e.Path, "-linux-gnu") {
			usrLib = append(usrLib, layer.Entry{Path: "usr/" + e.Path, Type: layer.Dir, Mode: 0o755})
		}
	}
	if !loader {
		return nil, fmt.Errorf("%s has no dynamic loader (ld-linux*) under /lib or /lib64: expected the data of Debian's libc6 package (dpkg-deb --fsys-tarfile)", dataTar)
	}
	entries = append(entries, usrLib...)
	return append(entries,
		layer.Entry{Path: "/etc/ld.so.conf", Data: []byte("include /etc/ld.so.conf.d/*.conf\n")},
	), nil
}

func readTar(file string, keep func(string) bool) ([]layer.Entry, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, fmt.Errorf("%w (make images fetches Debian packages with apt-get download and unpacks them with dpkg-deb --fsys-tarfile)", err)
	}
	defer f.Close()
	entries, err := layer.FromTar(f, keep)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	return entries, nil
}
