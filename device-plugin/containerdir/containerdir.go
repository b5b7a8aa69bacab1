// Package containerdir owns the plugin's per-container state on the host:
//
//	<stateDir>/ld.so.preload                         lists libvcuda.so (kept for containers allocated
//	                                                 by earlier versions, whose mounts name it)
//	<stateDir>/containers/<podUID>/<container>/
//	    ld.so.preload     libvcuda.so, then (CDI mode) the image's own entries written by the
//	                      createRuntime hook; mounted read-only at /etc/ld.so.preload
//	    vcuda.config      limiter config (mounted read-only)
//	    vcuda.control     the compute controller's allowances (mounted read-only; only the node writes it)
//	    allocation.json   what Allocate served (read back after a restart)
//	    shared/           the limiter's cross-process accounting (mounted read-write)
//
// Directories of pods that no longer exist are garbage-collected.
package containerdir

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"syscall"
	"time"

	"github.com/volcano-vgpu/volcano-vgpu/api"
	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/atomicfile"
)

// File names inside a container's directory.
const (
	ConfigFile     = "vcuda.config"
	AllocationFile = "allocation.json"
	SharedDir      = "shared"
	PreloadFile    = "ld.so.preload"
)

// RecordVersion is the version of allocation.json.
const RecordVersion = "v1"

// Record is allocation.json: one container's allocation.
type Record struct {
	Version       string            `json:"version"`
	PodUID        string            `json:"podUID"`
	Namespace     string            `json:"namespace"`
	Name          string            `json:"name"`
	Container     string            `json:"container"`
	Init          bool              `json:"init,omitempty"`
	Restartable   bool              `json:"restartable,omitempty"`
	Index         int               `json:"index"`
	IDs           []string          `json:"ids"`
	Devices       []api.DeviceShare `json:"devices"`
	ComputePolicy api.ComputePolicy `json:"computePolicy"`
	Time          time.Time         `json:"time"`
}

// Store is the state directory.
type Store struct{ Root string }

// Paths are the host paths of one container's files.
type Paths struct{ Dir, Config, Control, Shared, Preload string }

var (
	uidRE  = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9-]{0,127}$`)
	nameRE = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,251}[a-z0-9])?$`)
)

func (s Store) containers() string { return filepath.Join(s.Root, "containers") }

// Paths returns where a container's files live, refusing names that could
// escape the state directory.
func (s Store) Paths(podUID, container string) (Paths, error) {
	if !uidRE.MatchString(podUID) {
		return Paths{}, fmt.Errorf("pod UID %q: expected letters, digits and dashes", podUID)
	}
	if !nameRE.MatchString(container) {
		return Paths{}, fmt.Errorf("container name %q: expected a DNS label", container)
	}
	dir := filepath.Join(s.containers(), podUID, container)
	return Paths{Dir: dir, Config: filepath.Join(dir, ConfigFile), Control: filepath.Join(dir, api.ControlFile),
		Shared: filepath.Join(dir, SharedDir), Preload: filepath.Join(dir, PreloadFile)}, nil
}

// WritePreload writes the ld.so.preload file naming the in-container library.
func (s Store) WritePreload(containerLibrary string) (string, error) {
	if err := os.MkdirAll(s.Root, 0o755); err != nil {
		return "", fmt.Errorf("state directory: %w", err)
	}
	p := filepath.Join(s.Root, PreloadFile)
	return p, writeAtomic(p, []byte(containerLibrary+"\n"), 0o644)
}

// WriteContainerPreload writes a container's ld.so.preload naming the
// in-container library. A file already there is rewritten in place, never
// replaced: a container's bind mount may hold it.
func WriteContainerPreload(p Paths, containerLibrary string) error {
	f, err := os.OpenFile(p.Preload, os.O_WRONLY|os.O_CREATE|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0o644)
	if err != nil {
		return fmt.Errorf("container preload file: %w", err)
	}
	defer f.Close()
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
		return fmt.Errorf("container preload file %s: not a regular file (%v)", p.Preload, err)
	}
	b := []byte(containerLibrary + "\n")
	if _, err := f.WriteAt(b, 0); err != nil {
		return fmt.Errorf("container preload file %s: %w", p.Preload, err)
	}
	if err := f.Truncate(int64(len(b))); err != nil {
		return fmt.Errorf("container preload file %s: %w", p.Preload, err)
	}
	return f.Close()
}

// Write stores a container's limiter config and record, and creates its
// shared directory (world-writable: processes of any user share it).
func (s Store) Write(rec Record, config []byte) (Paths, error) {
	p, err := s.Paths(rec.PodUID, rec.Container)
	if err != nil {
		return Paths{}, err
	}
	if err := os.MkdirAll(p.Shared, 0o755); err != nil {
		return Paths{}, fmt.Errorf("container state directory: %w", err)
	}
	if err := os.Chmod(p.Shared, 0o777|fs.ModeSticky); err != nil {
		return Paths{}, err
	}
	if err := writeAtomic(p.Config, config, 0o444); err != nil {
		return Paths{}, err
	}
	if len(rec.Devices) > 0 {
		if err := CreateControl(p.Control, len(rec.Devices)); err != nil {
			return Paths{}, err
		}
	}
	rec.Version = RecordVersion
	b, err := json.MarshalIndent(rec, "", "  ")
	if err != nil {
		return Paths{}, err
	}
	return p, writeAtomic(filepath.Join(p.Dir, AllocationFile), b, 0o644)
}

// Records reads back every allocation.json; unreadable ones are reported
// in the error but do not stop the others.
func (s Store) Records() ([]Record, error) {
	var out []Record
	var errs []error
	files, _ := filepath.Glob(filepath.Join(s.containers(), "*", "*", AllocationFile))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		var r Record
		if err := json.Unmarshal(b, &r); err != nil || r.Version != RecordVersion {
			errs = append(errs, fmt.Errorf("%s: unreadable allocation record (version %q): %v", f, r.Version, err))
			continue
		}
		out = append(out, r)
	}
	return out, errors.Join(errs...)
}

// HasPod reports whether a pod has a directory here.
func (s Store) HasPod(podUID string) bool {
	if !uidRE.MatchString(podUID) {
		return false
	}
	_, err := os.Lstat(filepath.Join(s.containers(), podUID))
	return err == nil
}

// GC removes the directories of pods for which live returns false and whose
// directory is older than minAge (a pod allocated a moment ago may not be
// in the caller's cache yet). It returns the removed pod UIDs.
func (s Store) GC(live func(podUID string) bool, minAge time.Duration, now time.Time) ([]string, error) {
	entries, err := os.ReadDir(s.containers())
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var removed []string
	var errs []error
	for _, e := range entries {
		if !e.IsDir() || live(e.Name()) {
			continue
		}
		info, err := e.Info()
		if err != nil || now.Sub(info.ModTime()) < minAge {
			continue
		}
		if err := os.RemoveAll(filepath.Join(s.containers(), e.Name())); err != nil {
			errs = append(errs, err)
			continue
		}
		removed = append(removed, e.Name())
	}
	return removed, errors.Join(errs...)
}

// writeAtomic replaces a file durably (fsync of the file before the rename
// and of the directory after it): a record must survive a power loss.
func writeAtomic(path string, data []byte, mode fs.FileMode) error {
	return atomicfile.Write(path, data, mode)
}

// CreateControl creates a container's control file for n devices with no
// decision in it (the limiter decides locally until the node's controller
// writes), or checks the one already there (a container restart keeps it:
// the mount pins the file, so it is updated in place, never replaced).
func CreateControl(path string, n int) error {
	b, err := api.NewControl(n)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o644)
	if errors.Is(err, fs.ErrExist) {
		old, err := ReadNoFollow(path, api.ControlFileSize)
		if err != nil { // one made before the costs stays as it is (api.CheckControl)
			old, err = ReadNoFollow(path, api.ControlFileSizeV1)
		}
		if err != nil {
			return fmt.Errorf("control file: %w", err)
		}
		if err := api.CheckControl(old, n); err != nil {
			return fmt.Errorf("control file %s: %w (remove it to start over)", path, err)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("control file: %w", err)
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return fmt.Errorf("control file %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("control file %s: %w", path, err)
	}
	return f.Close()
}

// ReadNoFollow reads a regular file of exactly size bytes without following
// a symbolic link or blocking on a FIFO.
func ReadNoFollow(path string, size int) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() || st.Size() != int64(size) {
		return nil, fmt.Errorf("%s: %v of %d bytes, want a regular file of %d bytes", path, st.Mode().Type(), st.Size(), size)
	}
	b := make([]byte, size)
	if _, err := io.ReadFull(f, b); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return b, nil
}
