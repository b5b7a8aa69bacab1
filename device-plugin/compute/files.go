package compute

import (
	"fmt"
	"os"
	"syscall"

	"github.com/volcano-vgpu/volcano-vgpu/api"
	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/containerdir"
)

// controlMap is a control file mapped read-write on the host.
type controlMap struct{ b []byte }

func openControl(path string, n int) (*controlMap, error) {
	f, err := os.OpenFile(path, os.O_RDWR|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return nil, fmt.Errorf("control file: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	// a version 1 file (a container started before the costs) is written as it is
	if !st.Mode().IsRegular() || (st.Size() != api.ControlFileSize && st.Size() != api.ControlFileSizeV1) {
		return nil, fmt.Errorf("control file %s: %v of %d bytes, want a regular file of %d bytes (%d: version 1)", path,
			st.Mode().Type(), st.Size(), api.ControlFileSize, api.ControlFileSizeV1)
	}
	b, err := syscall.Mmap(int(f.Fd()), 0, int(st.Size()), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("control file %s: mmap: %w", path, err)
	}
	if err := api.CheckControl(b, n); err != nil {
		_ = syscall.Munmap(b)
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &controlMap{b: b}, nil
}

func (m *controlMap) close() error { return syscall.Munmap(m.b) }

// readUsage reads a container's usage report. The file lives in a directory
// the container writes: it is opened without following links or blocking, and
// must be a regular file of the exact size, else it is refused.
func readUsage(path string, n int) ([]byte, error) {
	b, err := containerdir.ReadNoFollow(path, api.UsageFileSize)
	if err != nil {
		return nil, err
	}
	if err := api.CheckUsage(b, n); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return b, nil
}
