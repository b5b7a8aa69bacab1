package containeremu

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
)

// inNewMountNamespace runs fn on an OS thread of its own that has first left
// the process's mount namespace for a new, private one. The thread is never
// given back to the Go scheduler: it ends, with its namespace reference,
// when fn returns, so only processes fn started keep the namespace alive.
func inNewMountNamespace(fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread exits with this goroutine
		errc <- func() error {
			if err := syscall.Unshare(syscall.CLONE_NEWNS); err != nil {
				return fmt.Errorf("unshare(CLONE_NEWNS): %w", err)
			}
			// Nothing mounted from here on may propagate to the host.
			if err := syscall.Mount("", "/", "", syscall.MS_REC|syscall.MS_PRIVATE, ""); err != nil {
				return fmt.Errorf("making mounts private: %w", err)
			}
			return fn()
		}()
	}()
	return <-errc
}

// probeNamespace reports why ModeNamespace cannot work here (nil: it can),
// by doing what startInNamespace does up to the overlay, in a scratch dir.
func probeNamespace(workDir string) error {
	dir, err := os.MkdirTemp(workDir, "probe.")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	return inNewMountNamespace(func() error {
		_, err := mountRoot(dir)
		return err
	})
}

// startInNamespace starts cmd chrooted in a container root built in dir.
func startInNamespace(cmd *exec.Cmd, dir string, s spec) error {
	return inNewMountNamespace(func() error {
		root, err := mountRoot(dir)
		if err != nil {
			return err
		}
		for _, m := range s.Mounts {
			if err := bindInto(root, m); err != nil {
				return err
			}
		}
		cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: root}
		cmd.Dir = "/"
		return cmd.Start()
	})
}

// mountRoot builds the container's root under dir (see the package doc) and
// returns its path.
func mountRoot(dir string) (string, error) {
	if strings.ContainsAny(dir, ",:\\") {
		return "", fmt.Errorf("container dir %q: overlayfs options cannot carry ',', ':' or '\\'", dir)
	}
	scratch := filepath.Join(dir, "mnt")
	if err := os.MkdirAll(scratch, 0o755); err != nil {
		return "", err
	}
	if err := mount("tmpfs", scratch, "tmpfs", 0, "mode=0755,size=16m"); err != nil {
		return "", err
	}
	upper, work, root := filepath.Join(scratch, "upper"), filepath.Join(scratch, "work"), filepath.Join(scratch, "root")
	for _, d := range []string{upper, work, root} {
		if err := os.Mkdir(d, 0o755); err != nil {
			return "", err
		}
	}
	if err := mount("overlay", root, "overlay", 0, "lowerdir=/,upperdir="+upper+",workdir="+work); err != nil {
		return "", err
	}
	if err := mount("/proc", filepath.Join(root, "proc"), "", syscall.MS_BIND|syscall.MS_REC, ""); err != nil {
		return "", err
	}
	if err := bindInto(root, mountSpec{Source: "/sys", Target: "/sys", ReadOnly: true}); err != nil {
		return "", err
	}
	return root, mountDev(root)
}

// mountDev gives the container a /dev of its own with the usual devices.
func mountDev(root string) error {
	dev := filepath.Join(root, "dev")
	if err := os.MkdirAll(dev, 0o755); err != nil {
		return err
	}
	if err := mount("tmpfs", dev, "tmpfs", syscall.MS_NOSUID, "mode=0755,size=1m"); err != nil {
		return err
	}
	for _, d := range []string{"null", "zero", "full", "random", "urandom", "tty"} {
		if err := bindInto(root, mountSpec{Source: "/dev/" + d, Target: "/dev/" + d}); err != nil {
			return err
		}
	}
	if err := os.Mkdir(filepath.Join(dev, "shm"), 0o1777); err != nil {
		return err
	}
	if err := mount("shm", filepath.Join(dev, "shm"), "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV, "mode=1777,size=64m"); err != nil {
		return err
	}
	for name, target := range map[string]string{"fd": "/proc/self/fd", "stdin": "/proc/self/fd/0", "stdout": "/proc/self/fd/1", "stderr": "/proc/self/fd/2"} {
		if err := os.Symlink(target, filepath.Join(dev, name)); err != nil {
			return err
		}
	}
	return nil
}

// bindInto bind-mounts m.Source at m.Target inside root, creating the mount
// point (a directory or an empty file, like the source) inside root.
func bindInto(root string, m mountSpec) error {
	st, err := os.Stat(m.Source)
	if err != nil {
		return fmt.Errorf("mount source: %w", err)
	}
	target, err := resolveIn(root, m.Target)
	if err != nil {
		return err
	}
	if st.IsDir() {
		err = os.MkdirAll(target, 0o755)
	} else if err = os.MkdirAll(filepath.Dir(target), 0o755); err == nil {
		var f *os.File
		if f, err = os.OpenFile(target, os.O_CREATE|os.O_RDONLY, 0o644); err == nil {
			err = f.Close()
		} else if errors.Is(err, fs.ErrExist) || errors.Is(err, syscall.EISDIR) {
			err = fmt.Errorf("mount point %s in the container is a directory, the source %s is not", m.Target, m.Source)
		}
	}
	if err != nil {
		return fmt.Errorf("mount point for %s: %w", m.Target, err)
	}
	if err := mount(m.Source, target, "", syscall.MS_BIND|syscall.MS_REC, ""); err != nil {
		return err
	}
	if !m.ReadOnly {
		return nil
	}
	// A read-only bind is a remount of the bind; it must keep the flags the
	// kernel locks (nosuid, nodev, noexec, atime), as runc does.
	var sfs syscall.Statfs_t
	if err := syscall.Statfs(target, &sfs); err != nil {
		return fmt.Errorf("statfs %s: %w", target, err)
	}
	flags := uintptr(syscall.MS_BIND | syscall.MS_REMOUNT | syscall.MS_RDONLY)
	for _, f := range lockedFlags {
		if sfs.Flags&f.st != 0 {
			flags |= uintptr(f.ms)
		}
	}
	return mount("", target, "", flags, "")
}

// lockedFlags maps statfs flags (ST_*) to the mount flags (MS_*) a remount
// must repeat; the two sets share values except relatime.
var lockedFlags = []struct{ st, ms int64 }{
	{st: 0x2, ms: syscall.MS_NOSUID},
	{st: 0x4, ms: syscall.MS_NODEV},
	{st: 0x8, ms: syscall.MS_NOEXEC},
	{st: 0x400, ms: syscall.MS_NOATIME},
	{st: 0x800, ms: syscall.MS_NODIRATIME},
	{st: 0x1000, ms: syscall.MS_RELATIME},
}

func mount(source, target, fstype string, flags uintptr, data string) error {
	if err := syscall.Mount(source, target, fstype, flags, data); err != nil {
		return &os.PathError{Op: fmt.Sprintf("mount %s (type %q, flags %#x, %q)", source, fstype, flags, data), Path: target, Err: err}
	}
	return nil
}
