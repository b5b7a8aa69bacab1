package containeremu

import (
	"errors"
	"fmt"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/volcano-vgpu/volcano-vgpu/api"
	"github.com/volcano-vgpu/volcano-vgpu/e2e/kubeletemu"
	"github.com/volcano-vgpu/volcano-vgpu/e2e/sim/simconfig"
)

// Container paths the emulated image and runtime hook use.
const (
	// WorkloadPath is where the image holds vcuda's workload program.
	WorkloadPath = "/usr/local/bin/cuda-workload"
	// DriverLibDir is where the runtime hook mounts the (fake) driver libraries.
	DriverLibDir = "/usr/local/nvidia/lib64"
	// GPUDevDir holds the exposed GPUs' state files (the fake's FAKEGPU_DIR).
	GPUDevDir = "/dev/fakegpu"
)

// imageEnv is the environment of the emulated image (a CUDA base image).
var imageEnv = []string{
	"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
	"HOME=/root",
	"LD_LIBRARY_PATH=/usr/local/nvidia/lib:" + DriverLibDir,
}

// ErrUnknownGPU: NVIDIA_VISIBLE_DEVICES names a GPU the node does not have.
var ErrUnknownGPU = errors.New("NVIDIA_VISIBLE_DEVICES names a GPU this node does not have")

// GPU is one GPU of a node as the driver knows it.
type GPU struct {
	UUID      string
	MemoryMiB int64
}

// NodeGPUs lists a simulated node's GPUs in index order.
func NodeGPUs(n simconfig.Node) []GPU {
	out := make([]GPU, len(n.GPUs))
	for i, g := range n.GPUs {
		out[i] = GPU{UUID: g.UUID, MemoryMiB: g.MemoryMiB}
	}
	return out
}

// MIGDevices lists the MIG devices a node's inventory publishes, each with
// its profile's memory: a MIG device is a GPU of its own to the container
// that gets it (its own UUID, its instance's memory), as the NVIDIA
// toolkit's CDI spec and runtime hook present it.
func MIGDevices(inv api.Inventory) []GPU {
	var out []GPU
	for _, g := range inv.GPUs {
		if g.MIG == nil {
			continue
		}
		for _, in := range g.MIG.Instances {
			if p, ok := g.MIG.Profile(in.Profile); ok && in.UUID != "" {
				out = append(out, GPU{UUID: in.UUID, MemoryMiB: p.MemoryMiB})
			}
		}
	}
	return out
}

// Container is one container of a pod bound to a simulated node.
type Container struct {
	Node     string
	NodeGPUs []GPU // every GPU of the node, in index order
	// NodeMIG: the node's MIG devices (MIGDevices), found by UUID only.
	NodeMIG []GPU
	PodUID  string
	Name    string
	// Response is what the device plugin answered for this container.
	Response kubeletemu.AllocateResponse
	// CDISpecDir is the node's directory of the device plugin's own CDI
	// specs (Config.NodeCDISpecDir; Emulator.Start sets it when empty).
	CDISpecDir string
	// QOSClass is the pod's status.qosClass (its cgroup's parent; "" is
	// BestEffort).
	QOSClass string
	// ExposeAllGPUs emulates a runtime that ignores NVIDIA_VISIBLE_DEVICES:
	// the container sees every GPU of the node and only libvcuda's config
	// keeps it to its own.
	ExposeAllGPUs bool
	// IgnoresPreload emulates a program whose loader ignores
	// /etc/ld.so.preload (musl's, or none: a static binary): libvcuda is
	// not loaded into it, so nothing in the process limits it.
	IgnoresPreload bool
}

// FromRecord is the container named name of a pod the kubelet emulator
// recorded, on a node with the given GPUs. Responses of every resource the
// container got are merged, as kubelet merges them.
func FromRecord(rec kubeletemu.Record, name string, nodeGPUs []GPU) (Container, error) {
	c := Container{Node: rec.Node, NodeGPUs: nodeGPUs, PodUID: rec.PodUID, Name: name,
		Response: kubeletemu.AllocateResponse{Envs: map[string]string{}}}
	found := false
	for _, cr := range rec.Containers {
		if cr.Name != name || cr.Response == nil {
			continue
		}
		found = true
		for k, v := range cr.Response.Envs {
			c.Response.Envs[k] = v
		}
		c.Response.Mounts = append(c.Response.Mounts, cr.Response.Mounts...)
		c.Response.Devices = append(c.Response.Devices, cr.Response.Devices...)
		c.Response.CDIDevices = append(c.Response.CDIDevices, cr.Response.CDIDevices...)
	}
	if !found {
		return Container{}, fmt.Errorf("pod %s/%s (%s) on %s: no Allocate response recorded for container %q (admitted %t, error %q)",
			rec.Namespace, rec.Name, rec.PodUID, rec.Node, name, rec.Admitted, rec.Error)
	}
	return c, nil
}

// visibleGPUs is what the runtime exposes: the GPUs of the response's CDI
// devices, plus those the NVIDIA runtime hook reads from
// NVIDIA_VISIBLE_DEVICES (UUIDs or node indexes, "all", or none for
// "none", "void" or unset), as on a node that has both.
func (c Container) visibleGPUs() ([]GPU, error) {
	if c.ExposeAllGPUs {
		return c.NodeGPUs, nil
	}
	out, err := c.cdiGPUs()
	if err != nil {
		return nil, err
	}
	v, ok := c.Response.Envs[api.EnvVisibleDevices]
	v = strings.TrimSpace(v)
	switch {
	case !ok || v == "" || v == "void" || v == "none":
	case v == "all":
		out = append(out, c.NodeGPUs...)
	default:
		for _, id := range strings.Split(v, ",") {
			g, ok := c.lookup(strings.TrimSpace(id))
			if !ok {
				return nil, fmt.Errorf("%w: %q on node %s", ErrUnknownGPU, id, c.Node)
			}
			out = append(out, g)
		}
	}
	// Each once, in the driver's (bus) order, not the variable's.
	var uniq []GPU
	for _, g := range out {
		if !slices.Contains(uniq, g) {
			uniq = append(uniq, g)
		}
	}
	all := c.devices()
	sort.SliceStable(uniq, func(a, b int) bool {
		return slices.Index(all, uniq[a]) < slices.Index(all, uniq[b])
	})
	return uniq, nil
}

// devices are the node's GPUs, then its MIG devices.
func (c Container) devices() []GPU {
	return append(slices.Clone(c.NodeGPUs), c.NodeMIG...)
}

// lookup finds a GPU by UUID or node index, or a MIG device by UUID.
func (c Container) lookup(id string) (GPU, bool) {
	if n, err := strconv.Atoi(id); err == nil && n >= 0 && n < len(c.NodeGPUs) {
		return c.NodeGPUs[n], true
	}
	all := c.devices()
	if i := slices.IndexFunc(all, func(g GPU) bool { return g.UUID == id }); i >= 0 {
		return all[i], true
	}
	return GPU{}, false
}

// VisibleGPUs is the UUIDs of the GPUs the container sees, in driver order.
func (c Container) VisibleGPUs() ([]string, error) {
	gpus, err := c.visibleGPUs()
	if err != nil {
		return nil, err
	}
	out := make([]string, len(gpus))
	for i, g := range gpus {
		out[i] = g.UUID
	}
	return out, nil
}

// mountSpec is one bind mount of the container: host source, container target.
type mountSpec struct {
	Source, Target string
	ReadOnly       bool
}

// spec is what the runtime does for one container, independent of the mode.
type spec struct {
	Mounts []mountSpec // parents before children
	Env    []string    // KEY=value, sorted
	GPUs   []GPU       // exposed, in driver order
}

// paths on the host the spec needs from the emulator.
type hostPaths struct {
	DriverDir string // fake libcuda.so.1 and libnvidia-ml.so.1
	Workload  string // the workload program
	GPUDir    string // the node's GPU state files
}

// stateFile is a GPU's state file name in the fake driver's directory.
func stateFile(uuid string) string { return uuid + ".fakegpu" }

// buildSpec lays out one container: the runtime's mounts and the
// environment (image env, driver env, then the response's envs).
func buildSpec(c Container, hp hostPaths) (spec, error) {
	gpus, err := c.visibleGPUs()
	if err != nil {
		return spec{}, err
	}
	s := spec{GPUs: gpus}
	for _, m := range c.Response.Mounts {
		if !path.IsAbs(m.ContainerPath) || !filepath.IsAbs(m.HostPath) {
			return spec{}, fmt.Errorf("mount %s -> %s: both paths must be absolute", m.HostPath, m.ContainerPath)
		}
		s.Mounts = append(s.Mounts, mountSpec{Source: m.HostPath, Target: path.Clean(m.ContainerPath), ReadOnly: m.ReadOnly})
	}
	s.Mounts = append(s.Mounts,
		mountSpec{Source: hp.DriverDir, Target: DriverLibDir, ReadOnly: true},
		mountSpec{Source: hp.Workload, Target: WorkloadPath, ReadOnly: true})
	var devs []string
	for _, g := range gpus {
		s.Mounts = append(s.Mounts, mountSpec{Source: filepath.Join(hp.GPUDir, stateFile(g.UUID)), Target: path.Join(GPUDevDir, stateFile(g.UUID))})
		devs = append(devs, fmt.Sprintf("%s:%d", g.UUID, g.MemoryMiB))
	}
	// Parents first; kubelet's order otherwise.
	sort.SliceStable(s.Mounts, func(a, b int) bool { return depth(s.Mounts[a].Target) < depth(s.Mounts[b].Target) })

	env := map[string]string{}
	for _, kv := range imageEnv {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	env["FAKEGPU_DIR"] = GPUDevDir
	env["FAKEGPU_DEVICES"] = strings.Join(devs, ",")
	for k, v := range c.Response.Envs {
		env[k] = v
	}
	for k, v := range env {
		s.Env = append(s.Env, k+"="+v)
	}
	sort.Strings(s.Env)
	return s, nil
}

func depth(p string) int { return strings.Count(path.Clean(p), "/") }

// hostPathOf maps a container path to the host through the spec's mounts
// (the deepest mount containing it).
func (s spec) hostPathOf(containerPath string) (string, bool) {
	p := path.Clean(containerPath)
	best := -1
	for i, m := range s.Mounts {
		if (p == m.Target || strings.HasPrefix(p, m.Target+"/")) && (best < 0 || depth(m.Target) >= depth(s.Mounts[best].Target)) {
			best = i
		}
	}
	if best < 0 {
		return "", false
	}
	m := s.Mounts[best]
	return filepath.Join(m.Source, strings.TrimPrefix(p, m.Target)), true
}

// getenv reads KEY from the spec's environment.
func (s spec) getenv(key string) string {
	for _, kv := range s.Env {
		if k, v, _ := strings.Cut(kv, "="); k == key {
			return v
		}
	}
	return ""
}
