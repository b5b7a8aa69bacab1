package preloadhook

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// Args are what the plugin's CDI spec passes the hook.
type Args struct {
	// File is the container's preload file on the host (the plugin's,
	// bind-mounted read-only at /etc/ld.so.preload).
	File string
	// Library is libvcuda.so's path inside the container.
	Library string
}

// Subcommand is the hook's first argument.
const Subcommand = "preload"

// Argv is the hook's command line for a CDI spec (argv[0] included).
func Argv(a Args) []string {
	return []string{"vgpu-cdi-hook", Subcommand, "--file=" + a.File, "--library=" + a.Library}
}

// Validate checks the arguments: absolute paths, the file named ld.so.preload.
func (a Args) Validate() error {
	if !filepath.IsAbs(a.File) || filepath.Clean(a.File) != a.File || filepath.Base(a.File) != "ld.so.preload" {
		return fmt.Errorf("--file: expected the absolute, clean host path of a container's ld.so.preload, got %q", a.File)
	}
	if !filepath.IsAbs(a.Library) || strings.ContainsAny(a.Library, " \t\n:#") {
		return fmt.Errorf("--library: expected an absolute path inside the container without white space, ':' or '#', got %q", a.Library)
	}
	return nil
}

// state is the part of the OCI state the hook reads.
type state struct {
	Bundle string `json:"bundle"`
}

// bundleConfig is the part of the bundle's config.json the hook reads.
type bundleConfig struct {
	Root struct {
		Path string `json:"path"`
	} `json:"root"`
	Process process `json:"process"`
}

// maxState bounds what the hook reads from the runtime (config.json of a
// container with many mounts and a long environment is well under this).
const maxState = 16 << 20

// Run reads the OCI state from stdin and rewrites the container's preload file.
func Run(stdin io.Reader, a Args) error {
	if err := a.Validate(); err != nil {
		return err
	}
	root, proc, err := rootfs(stdin)
	if err != nil {
		return err
	}
	image, err := ReadImageFile(root)
	if err != nil {
		return err
	}
	b, kept, err := Merge(a.Library, image)
	if err != nil {
		return err
	}
	if err := WriteInPlace(a.File, b); err != nil {
		return err
	}
	r := Inspect(root, proc)
	r.KeptEntries = kept
	return WriteReport(a.File, r)
}

// rootfs finds the container's root file system and process from the OCI state.
func rootfs(stdin io.Reader) (string, process, error) {
	var st state
	if err := json.NewDecoder(io.LimitReader(stdin, maxState)).Decode(&st); err != nil {
		return "", process{}, fmt.Errorf("OCI state on stdin: %w (the runtime runs this as a createRuntime hook)", err)
	}
	if !filepath.IsAbs(st.Bundle) {
		return "", process{}, fmt.Errorf("OCI state on stdin: bundle %q is not an absolute path", st.Bundle)
	}
	f, err := os.Open(filepath.Join(st.Bundle, "config.json"))
	if err != nil {
		return "", process{}, fmt.Errorf("bundle config: %w", err)
	}
	defer f.Close()
	var cfg bundleConfig
	if err := json.NewDecoder(io.LimitReader(f, maxState)).Decode(&cfg); err != nil {
		return "", process{}, fmt.Errorf("bundle config %s: %w", f.Name(), err)
	}
	root := cfg.Root.Path
	if root == "" {
		return "", process{}, fmt.Errorf("bundle config %s: no root.path", f.Name())
	}
	if !filepath.IsAbs(root) {
		root = filepath.Join(st.Bundle, root)
	}
	return root, cfg.Process, nil
}

// ReadImageFile reads <root>/etc/ld.so.preload as the image has it: absent
// is empty; a symbolic link at etc or at the file, or anything but a
// regular file, is refused (the hook runs as root in the host's mount
// namespace, where an image's absolute link would point at a host file).
func ReadImageFile(root string) ([]byte, error) {
	rfd, err := unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("container root %s: %w", root, err)
	}
	defer unix.Close(rfd)
	efd, err := openat(rfd, "etc", unix.O_RDONLY|unix.O_DIRECTORY)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer unix.Close(efd)
	fd, err := openat(efd, "ld.so.preload", unix.O_RDONLY|unix.O_NONBLOCK)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), "/etc/ld.so.preload")
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%w: /etc/ld.so.preload in the image is a %v, not a regular file; make it a regular file", ErrImagePreload, st.Mode().Type())
	}
	if st.Size() > MaxImageFile {
		return nil, fmt.Errorf("%w: /etc/ld.so.preload in the image has %d bytes, more than %d", ErrImagePreload, st.Size(), MaxImageFile)
	}
	b, err := io.ReadAll(io.LimitReader(f, MaxImageFile+1))
	if err != nil {
		return nil, err
	}
	if len(b) > MaxImageFile {
		return nil, fmt.Errorf("%w: /etc/ld.so.preload in the image grew past %d bytes", ErrImagePreload, MaxImageFile)
	}
	return b, nil
}

// openat opens name under dir without following a symbolic link and names
// a link plainly.
func openat(dir int, name string, flags int) (int, error) {
	fd, err := unix.Openat(dir, name, flags|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err == nil {
		return fd, nil
	}
	if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) {
		var st unix.Stat_t
		if unix.Fstatat(dir, name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK {
			return -1, fmt.Errorf("%w: %s in the image is a symbolic link; make /etc a directory and /etc/ld.so.preload a regular file", ErrImagePreload, name)
		}
	}
	if errors.Is(err, unix.ENOENT) {
		return -1, fs.ErrNotExist
	}
	return -1, fmt.Errorf("%s in the image: %w", name, err)
}

// WriteInPlace replaces the contents of the container's preload file
// without replacing the file (the container's bind mount holds its inode).
// The file must exist (Allocate created it) and be a regular file; a
// symbolic link is refused.
func WriteInPlace(path string, b []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if err != nil {
		return fmt.Errorf("container preload file: %w (the device plugin writes it at Allocate; is cdi.hookPath's --file the plugin's stateDir?)", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	if !st.Mode().IsRegular() {
		return fmt.Errorf("container preload file %s: a %v, want a regular file", path, st.Mode().Type())
	}
	if _, err := f.WriteAt(b, 0); err != nil {
		return fmt.Errorf("container preload file %s: %w", path, err)
	}
	if err := f.Truncate(int64(len(b))); err != nil {
		return fmt.Errorf("container preload file %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("container preload file %s: %w", path, err)
	}
	return f.Close()
}
