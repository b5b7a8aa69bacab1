package containeremu

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash/fnv"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// ContainerID is the runtime's ID of a pod's container on the simulated
// nodes: 64 hex digits, as containerd and CRI-O give, the SHA-256 of
// "<pod UID>/<container name>". The simulated kubelet (kwok's pod stages,
// e2e/sim/kwok-stages.yaml) reports the same ID in the pod's
// containerStatuses as "containerd://<id>", so the device plugin finds a
// container's processes the way it does on a real node: host pid → cgroup
// → (pod UID, container ID) → the container's name in the pod's status.
func ContainerID(podUID, name string) string {
	sum := sha256.Sum256([]byte(podUID + "/" + name))
	return hex.EncodeToString(sum[:])
}

// NodeProcRoot is the simulated node's view of its processes' cgroups: the
// container emulator writes <root>/<pid>/cgroup for every process it starts
// on the node, as the kernel shows /proc/<pid>/cgroup of a process a
// runtime placed in the container's cgroup, links <root>/<pid>/maps to the
// process's real memory map (/proc/<pid>/maps: what it loaded), and removes
// both when the process exits. The node's device plugin reads it as its
// host /proc (hostPID).
func (c Config) NodeProcRoot(node string) string {
	return filepath.Join(c.WorkDir, node, "proc")
}

// cgroupLayout is how a node's kubelet and runtime name container cgroups.
type cgroupLayout int

const (
	// systemdV2: the systemd cgroup driver on cgroup v2, containerd
	// (kubepods.slice/…/cri-containerd-<id>.scope), the common default.
	systemdV2 cgroupLayout = iota
	// cgroupfsV1: the cgroupfs driver on cgroup v1, one line per hierarchy
	// (kubepods/<qos>/pod<uid>/<id>), as older nodes have.
	cgroupfsV1
)

// layoutOf gives each simulated node one layout, stable by name, so a
// cluster has nodes of both kinds as a mixed fleet does.
func layoutOf(node string) cgroupLayout {
	h := fnv.New32a()
	h.Write([]byte(node))
	return cgroupLayout(h.Sum32() % 2)
}

// cgroupFile is /proc/<pid>/cgroup of a process of container id in pod uid
// of QoS class qos (Guaranteed, Burstable or BestEffort; "" is BestEffort).
func cgroupFile(layout cgroupLayout, podUID, id, qos string) string {
	qos = strings.ToLower(qos)
	if qos == "" {
		qos = "besteffort"
	}
	switch layout {
	case cgroupfsV1:
		path := "/kubepods/" + qos + "/pod" + podUID + "/" + id
		if qos == "guaranteed" {
			path = "/kubepods/pod" + podUID + "/" + id
		}
		var b strings.Builder
		for i, h := range []string{"pids", "memory", "cpu,cpuacct", "devices", "freezer", "name=systemd"} {
			fmt.Fprintf(&b, "%d:%s:%s\n", 12-i, h, path)
		}
		b.WriteString("0::/\n")
		return b.String()
	default:
		uid := strings.ReplaceAll(podUID, "-", "_")
		slice := "/kubepods.slice/kubepods-" + qos + ".slice/kubepods-" + qos + "-pod" + uid + ".slice"
		if qos == "guaranteed" {
			slice = "/kubepods.slice/kubepods-pod" + uid + ".slice"
		}
		return "0::" + slice + "/cri-containerd-" + id + ".scope\n"
	}
}

// placeInCgroup writes pid's cgroup file under the node's proc root; the
// returned func removes it (the process is gone).
func (e *Emulator) placeInCgroup(c Container, pid int) (func(), error) {
	dir := filepath.Join(e.cfg.NodeProcRoot(c.Node), strconv.Itoa(pid))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	body := cgroupFile(layoutOf(c.Node), c.PodUID, ContainerID(c.PodUID, c.Name), c.QOSClass)
	if err := os.WriteFile(filepath.Join(dir, "cgroup"), []byte(body), 0o644); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	if err := os.Symlink(filepath.Join("/proc", strconv.Itoa(pid), "maps"), filepath.Join(dir, "maps")); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	return func() { _ = os.RemoveAll(dir) }, nil
}
