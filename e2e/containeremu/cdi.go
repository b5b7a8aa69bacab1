package containeremu

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/cdi"
)

// The emulated CDI registry of a node, as a CDI-enabled runtime (containerd
// 1.7+, CRI-O) resolves the names an Allocate answer lists:
//   - kind nvidia.com/gpu is the NVIDIA Container Toolkit's generated spec:
//     every GPU of the node by UUID and by index, and "all";
//   - kind volcano-vgpu.io/limiter is the device plugin's own spec files in
//     the node's Config.NodeCDISpecDir; their createRuntime hooks run before the process
//     starts, with the OCI state of a bundle whose root is the host's / (the
//     emulated image), and a failing hook fails the container, as in runc;
//   - kind volcano-vgpu.io/mig is the device plugin's spec of a container's
//     MIG devices in the same directory: the device of that name gives the
//     MIG device its NVIDIA_VISIBLE_DEVICES names (one of Container.NodeMIG),
//     and must list the device nodes a MIG device needs (its GPU's, two
//     capabilities under /dev/nvidia-caps, nvidiactl, nvidia-uvm).
//
// Any other name is unresolvable, which fails the container as containerd does.

// ErrUnresolvableCDI: a CDI device the emulated registry does not know.
var ErrUnresolvableCDI = errors.New("unresolvable CDI devices")

// toolkitKind is the kind the NVIDIA toolkit's spec has.
const toolkitKind = cdi.DefaultKind

// cdiGPUs resolves the GPU names among the response's CDI devices.
func (c Container) cdiGPUs() ([]GPU, error) {
	var out []GPU
	for _, name := range c.Response.CDIDevices {
		kind, dev, ok := strings.Cut(name, "=")
		switch {
		case !ok:
			return nil, fmt.Errorf("%w: %q is not kind=name", ErrUnresolvableCDI, name)
		case kind == cdi.LimiterKind:
			continue
		case kind == cdi.MIGKind:
			g, err := c.migGPU(name, dev)
			if err != nil {
				return nil, err
			}
			out = append(out, g)
			continue
		case kind != toolkitKind:
			return nil, fmt.Errorf("%w: %q (no spec of kind %s on node %s)", ErrUnresolvableCDI, name, kind, c.Node)
		case dev == "all":
			return c.NodeGPUs, nil
		}
		g, ok := c.lookup(dev)
		if !ok {
			return nil, fmt.Errorf("%w: %q (node %s has no such GPU or MIG device)", ErrUnresolvableCDI, name, c.Node)
		}
		out = append(out, g)
	}
	return out, nil
}

// migGPU resolves the plugin's MIG device dev (<podUID>_<container>_<MIG
// UUID>) against its spec in the node's spec directory.
func (c Container) migGPU(name, dev string) (GPU, error) {
	fail := func(format string, a ...any) (GPU, error) {
		return GPU{}, fmt.Errorf("%w: %q: %s", ErrUnresolvableCDI, name, fmt.Sprintf(format, a...))
	}
	uid, rest, ok := strings.Cut(dev, "_")
	i := strings.LastIndex(rest, "_")
	if !ok || i < 0 {
		return fail("not <pod UID>_<container>_<MIG UUID>")
	}
	sp, err := cdi.Specs{Dir: c.CDISpecDir}.ReadMIG(uid, rest[:i])
	if err != nil {
		return fail("%v", err)
	}
	k := slices.IndexFunc(sp.Devices, func(d cdi.Device) bool { return d.Name == dev })
	if sp.Kind != cdi.MIGKind || k < 0 {
		return fail("the spec in %s has no such device: %s=%v", c.CDISpecDir, sp.Kind, sp.Devices)
	}
	edits := sp.Devices[k].ContainerEdits
	var caps int
	nodes := map[string]bool{}
	for _, n := range edits.DeviceNodes {
		nodes[n.Path] = true
		if strings.HasPrefix(n.Path, "/dev/nvidia-caps/nvidia-cap") {
			caps++
		}
	}
	if caps != 2 || !nodes["/dev/nvidiactl"] || !nodes["/dev/nvidia-uvm"] || len(nodes) != 5 {
		return fail("device nodes %v: want the GPU's, two capabilities, nvidiactl and nvidia-uvm", edits.DeviceNodes)
	}
	var uuid string
	for _, e := range edits.Env {
		if v, ok := strings.CutPrefix(e, cdi.EnvVisibleDevices+"="); ok {
			uuid = v
		}
	}
	g, ok := c.lookup(uuid)
	if !ok || !strings.HasPrefix(uuid, "MIG-") {
		return fail("its %s=%q names no MIG device of node %s", cdi.EnvVisibleDevices, uuid, c.Node)
	}
	return g, nil
}

// limiterSpecs reads the device plugin's specs of the response's limiter
// devices from dir.
func (c Container) limiterSpecs(dir string) ([]cdi.Spec, error) {
	var out []cdi.Spec
	for _, name := range c.Response.CDIDevices {
		kind, dev, _ := strings.Cut(name, "=")
		if kind != cdi.LimiterKind {
			continue
		}
		uid, container, ok := strings.Cut(dev, "_")
		if !ok {
			return nil, fmt.Errorf("%w: %q", ErrUnresolvableCDI, name)
		}
		sp, err := cdi.Specs{Dir: dir}.Read(uid, container)
		if err != nil {
			return nil, fmt.Errorf("%w: %q: %v", ErrUnresolvableCDI, name, err)
		}
		if sp.Kind != kind || len(sp.Devices) != 1 || sp.Devices[0].Name != dev {
			return nil, fmt.Errorf("%w: %q: the spec in %s names %s=%v", ErrUnresolvableCDI, name, dir, sp.Kind, sp.Devices)
		}
		out = append(out, sp)
	}
	return out, nil
}

// runHooks runs the createRuntime hooks of the container's limiter devices
// with the OCI state of a bundle in dir whose root is the host's / and whose
// process is argv with env.
func runHooks(ctx context.Context, specs []cdi.Spec, dir, id string, argv, env []string) error {
	var hooks []cdi.Hook
	for _, sp := range specs {
		for _, d := range sp.Devices {
			for _, h := range d.ContainerEdits.Hooks {
				if h.HookName == cdi.CreateRuntime {
					hooks = append(hooks, h)
				}
			}
		}
	}
	if len(hooks) == 0 {
		return nil
	}
	bundle := filepath.Join(dir, "bundle")
	if err := os.MkdirAll(bundle, 0o755); err != nil {
		return err
	}
	cfg, err := json.Marshal(map[string]any{"ociVersion": "1.2.0", "root": map[string]any{"path": "/"},
		"process": map[string]any{"args": argv, "env": env, "cwd": "/"}})
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(bundle, "config.json"), cfg, 0o644); err != nil {
		return err
	}
	state, err := json.Marshal(map[string]any{"ociVersion": "1.2.0", "id": id, "status": "creating", "bundle": bundle})
	if err != nil {
		return err
	}
	for _, h := range hooks {
		timeout := time.Minute
		if h.Timeout != nil {
			timeout = time.Duration(*h.Timeout) * time.Second
		}
		hctx, cancel := context.WithTimeout(ctx, timeout)
		cmd := exec.CommandContext(hctx, h.Path)
		if len(h.Args) > 0 {
			cmd.Args = h.Args
		}
		cmd.Stdin = bytes.NewReader(state)
		out, err := cmd.CombinedOutput()
		cancel()
		if err != nil {
			return fmt.Errorf("error running %s hook %s: %w, stdout/stderr: %s", h.HookName, h.Path, err, bytes.TrimSpace(out))
		}
	}
	return nil
}
