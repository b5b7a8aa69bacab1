// Package preloadhook is the createRuntime hook that keeps an image's own
// /etc/ld.so.preload when the device plugin bind-mounts its per-container
// preload file over it.
//
// The runtime runs the hook (vgpu-cdi-hook preload, named by the plugin's
// per-container CDI device) in its own namespaces after the container's
// mounts are prepared and before pivot_root, with the OCI state on stdin.
// From there the image's root file system shows the image's file, not the
// bind mount. The hook reads <root>/etc/ld.so.preload without following any
// symbolic link (the image is the tenant's: it must not make a root process
// read or write host files), and rewrites the container's preload file on the
// host in place (same inode: the container's bind mount points at it) as
// libvcuda.so first, then the image's entries. Inside the container the file
// stays read-only.
package preloadhook

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
)

// MaxImageFile bounds the image's /etc/ld.so.preload (a few paths).
const MaxImageFile = 64 << 10

// maxEntry is PATH_MAX: the dynamic loader cannot open a longer name.
const maxEntry = 4096

// ErrImagePreload: the image's /etc/ld.so.preload cannot be kept.
var ErrImagePreload = errors.New("the image's /etc/ld.so.preload cannot be kept")

// Entries parses an ld.so.preload file as glibc's loader does: names
// separated by white space or ':', '#' starts a comment to the end of the line.
func Entries(b []byte) ([]string, error) {
	if bytes.IndexByte(b, 0) >= 0 {
		return nil, fmt.Errorf("%w: it holds a NUL byte; make it a text file of library paths", ErrImagePreload)
	}
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		line, _, _ = strings.Cut(line, "#")
		for _, f := range strings.FieldsFunc(line, func(r rune) bool { return r == ':' || r == ' ' || r == '\t' || r == '\r' || r == '\v' || r == '\f' }) {
			if len(f) > maxEntry {
				return nil, fmt.Errorf("%w: an entry is %d bytes, longer than a path can be (%d)", ErrImagePreload, len(f), maxEntry)
			}
			out = append(out, f)
		}
	}
	return out, nil
}

// Merge returns the container's preload file: library first, then the
// image's entries in their order, each once, library not repeated; and how
// many of the image's entries it kept.
func Merge(library string, image []byte) ([]byte, int, error) {
	entries, err := Entries(image)
	if err != nil {
		return nil, 0, err
	}
	var b strings.Builder
	b.WriteString(library + "\n")
	seen := map[string]bool{library: true}
	kept := 0
	for _, e := range entries {
		if seen[e] {
			continue
		}
		seen[e] = true
		if kept == 0 {
			b.WriteString("# kept from the image's /etc/ld.so.preload:\n")
		}
		kept++
		b.WriteString(e + "\n")
	}
	return []byte(b.String()), kept, nil
}
