package kubeletemu

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Faults the harness injects into a node's kubelet, each switched by a file
// in <base>/<node>/faults (harness-only; a real kubelet has no such thing).
const podResourcesDownFile = "podresources-unavailable"

func faultPath(baseDir, node, name string) string {
	return filepath.Join(baseDir, node, "faults", name)
}

// SetPodResourcesDown makes the node's PodResources API answer every call
// with gRPC Unavailable (as while kubelet restarts), or serve again.
func SetPodResourcesDown(baseDir, node string, down bool) error {
	p := faultPath(baseDir, node, podResourcesDownFile)
	if !down {
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	return os.WriteFile(p, nil, 0o644)
}

// podResourcesDown reports whether the harness has taken the API down.
func (n *Node) podResourcesDown() error {
	if _, err := os.Stat(faultPath(filepath.Dir(n.dir), n.name, podResourcesDownFile)); err == nil {
		return status.Error(codes.Unavailable, "kubelet PodResources API unavailable (fault injected by the harness)")
	}
	return nil
}
