// Package procmap maps a host pid to the Kubernetes container it runs in:
// the pid's cgroup (from <procRoot>/<pid>/cgroup, cgroup v1 or v2) names the
// pod UID and the runtime's container ID the way kubelet lays them out
// (cgroupfs or systemd driver, guaranteed, burstable or besteffort), and the
// pod's status names the container that has that ID.
//
// The node's GPU processes are keyed by host pids (NVML); a container's own
// pids mean nothing outside its pid namespace. So the device plugin needs the
// host's /proc (hostPID) to read cgroups and to signal processes.
package procmap

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Cgroup is what a process's cgroup path says about its container.
type Cgroup struct {
	PodUID      string // with dashes, as in metadata.uid
	ContainerID string // the runtime's ID, without a runtime:// prefix
	QoS         string // guaranteed, burstable or besteffort
}

// ErrNotInPod is returned for a process no kubelet pod cgroup holds (a host
// process, a runtime shim, a container's sandbox cgroup itself).
var ErrNotInPod = errors.New("not in a kubelet container cgroup")

// ParseCgroupFile reads the contents of /proc/<pid>/cgroup: one line per
// hierarchy, "id:controllers:path" (v1) or "0::path" (v2). The first line
// whose path names a pod container wins (every hierarchy of a container
// names the same one).
func ParseCgroupFile(data string) (Cgroup, error) {
	for _, line := range strings.Split(data, "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			return Cgroup{}, fmt.Errorf("cgroup line %q: expected hierarchy-id:controllers:path", line)
		}
		if cg, ok := ParsePath(parts[2]); ok {
			return cg, nil
		}
	}
	return Cgroup{}, ErrNotInPod
}

// ParsePath recognises a container's cgroup path. It looks for the pod
// component anywhere in the path, so it also reads paths seen from inside a
// cgroup namespace ("/../../kubepods-…") and under a custom cgroup root:
//
//	cgroupfs: …/kubepods[/burstable|/besteffort]/pod<uid>/<id>       (containerd, docker)
//	          …/kubepods[/burstable|/besteffort]/pod<uid>/crio-<id>
//	systemd:  …/kubepods[-burstable|-besteffort]-pod<uid_with_underscores>.slice/
//	          cri-containerd-<id>.scope | crio-<id>.scope | docker-<id>.scope
func ParsePath(path string) (Cgroup, bool) {
	comps := strings.Split(strings.Trim(path, "/"), "/")
	// The container is the component right after the pod's: processes sit
	// in the container's cgroup or below it (a nested cgroup of its own).
	for i := 0; i+1 < len(comps); i++ {
		uid, qos, ok := podComponent(comps[i], parentOf(comps, i))
		if !ok {
			continue
		}
		id, ok := containerComponent(comps[i+1])
		if !ok {
			return Cgroup{}, false
		}
		return Cgroup{PodUID: uid, ContainerID: id, QoS: qos}, true
	}
	return Cgroup{}, false
}

func parentOf(comps []string, i int) string {
	if i == 0 {
		return ""
	}
	return comps[i-1]
}

// podComponent recognises "pod<uid>" (cgroupfs; its parent says the QoS
// class) and "kubepods[-<qos>]-pod<uid>.slice" (systemd).
func podComponent(c, parent string) (uid, qos string, ok bool) {
	if rest, found := strings.CutSuffix(c, ".slice"); found {
		// kubelet's own slice prefix may be longer (--cgroup-root, kind's
		// "kubelet-kubepods-…")
		i := strings.LastIndex(rest, "kubepods-")
		if i < 0 || i > 0 && rest[i-1] != '-' {
			return "", "", false
		}
		rest = rest[i+len("kubepods-"):]
		qos = "guaranteed"
		for _, q := range []string{"burstable", "besteffort"} {
			if r, f := strings.CutPrefix(rest, q+"-"); f {
				rest, qos = r, q
				break
			}
		}
		rest, found = strings.CutPrefix(rest, "pod")
		if !found || !validUID(rest, '_') {
			return "", "", false
		}
		return strings.ReplaceAll(rest, "_", "-"), qos, true
	}
	rest, found := strings.CutPrefix(c, "pod")
	if !found || !validUID(rest, '-') {
		return "", "", false
	}
	switch parent {
	case "kubepods":
		qos = "guaranteed"
	case "burstable", "besteffort":
		qos = parent
	default:
		return "", "", false
	}
	return rest, qos, true
}

// validUID accepts a UUID-like string (hex digits and sep).
func validUID(s string, sep byte) bool {
	if len(s) < 8 || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F' || c == sep) {
			return false
		}
	}
	return true
}

// containerComponent recognises a runtime's container cgroup.
func containerComponent(c string) (string, bool) {
	if rest, ok := strings.CutSuffix(c, ".scope"); ok {
		for _, p := range []string{"cri-containerd-", "crio-", "docker-"} {
			if id, found := strings.CutPrefix(rest, p); found {
				if strings.HasPrefix(id, "conmon-") {
					return "", false // CRI-O's monitor, not the container
				}
				return id, validID(id)
			}
		}
		return "", false
	}
	if strings.HasPrefix(c, "crio-conmon-") {
		return "", false
	}
	id := strings.TrimPrefix(c, "crio-")
	return id, validID(id)
}

// validID accepts a runtime container ID: hex, 12 to 128 digits.
func validID(s string) bool {
	if len(s) < 12 || len(s) > 128 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// TrimRuntime strips "containerd://", "cri-o://", "docker://" from a
// containerStatuses[].containerID.
func TrimRuntime(id string) string {
	if _, rest, ok := strings.Cut(id, "://"); ok {
		return rest
	}
	return id
}

// Names looks up the name of a pod's container by runtime container ID (from
// the pod's containerStatuses and initContainerStatuses).
type Names func(podUID, containerID string) (name string, ok bool)

// Mapper maps host pids to containers. The zero ProcRoot is /proc.
type Mapper struct {
	ProcRoot string
	Names    Names
}

// Lookup returns the cgroup of a host pid.
func (m Mapper) Lookup(hostPID uint32) (Cgroup, error) {
	root := m.ProcRoot
	if root == "" {
		root = "/proc"
	}
	p := filepath.Join(root, strconv.FormatUint(uint64(hostPID), 10), "cgroup")
	b, err := os.ReadFile(p)
	if err != nil {
		return Cgroup{}, fmt.Errorf("pid %d: %w (the device plugin needs the host's pid namespace, hostPID, to read a GPU process's cgroup)", hostPID, err)
	}
	cg, err := ParseCgroupFile(string(b))
	if err != nil {
		return Cgroup{}, fmt.Errorf("pid %d: %w", hostPID, err)
	}
	return cg, nil
}

// Owners returns "podUID/container" (compute.Tenant.Key) of the container
// running hostPID; ok is false for a process in no known container.
func (m Mapper) Owners(hostPID uint32) (key string, ok bool) {
	cg, err := m.Lookup(hostPID)
	if err != nil || m.Names == nil {
		return "", false
	}
	name, ok := m.Names(cg.PodUID, cg.ContainerID)
	if !ok {
		return "", false
	}
	return cg.PodUID + "/" + name, true
}
