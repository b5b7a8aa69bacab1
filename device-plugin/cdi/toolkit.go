package cdi

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"sigs.k8s.io/yaml"
	specs "tags.cncf.io/container-device-interface/specs-go"
)

// The driver's libraries and hooks for the plugin's MIG devices. A whole GPU
// is handed to the container as the toolkit's nvidia.com/gpu=<UUID>, and the
// runtime applies the spec-level containerEdits of the toolkit's spec with it:
// the mounts of libcuda and the other driver files, the toolkit's hooks
// (ldcache, symlinks), the control device nodes. A MIG device named in the
// plugin's own spec gets none of that from the toolkit's spec; ToolkitEdits
// reads those edits so that WriteMIG copies them into the MIG spec.

// DefaultToolkitSpecDirs are the directories a CDI runtime reads specs from,
// lowest priority first (a later directory's spec wins, as in the CDI
// registry of containerd and CRI-O).
func DefaultToolkitSpecDirs() []string { return []string{"/etc/cdi", DefaultSpecDir} }

// ErrToolkitSpec: a spec of the toolkit's kind cannot be read.
var ErrToolkitSpec = errors.New("malformed NVIDIA CDI spec")

// Toolkit is what ToolkitEdits found.
type Toolkit struct {
	// Files are the specs of the kind, highest priority first; none when
	// the node has no toolkit spec in the directories.
	Files []string
	// Edits are their spec-level edits for a MIG device: mounts, hooks,
	// environment but NVIDIA_VISIBLE_DEVICES, device nodes but the GPUs'
	// and the MIG capabilities' (each MIG device names its own). Where two
	// specs give the same mount target, device node or variable, the higher
	// priority spec's is kept.
	Edits ContainerEdits
}

// Found reports whether a toolkit spec was read.
func (t Toolkit) Found() bool { return len(t.Files) > 0 }

// gpuNode matches the device nodes of one GPU or one MIG capability.
var gpuNode = regexp.MustCompile(`^/dev/nvidia([0-9]+|-caps/.*)$`)

// ToolkitEdits reads the specs of kind (the toolkit's, nvidia.com/gpu) in
// dirs (lowest priority first) and returns their spec-level edits. A
// missing directory has none. A file of the kind that cannot be parsed, or
// whose edits lack a path, is ErrToolkitSpec naming it; a file that cannot
// be parsed at all counts as the toolkit's when its name starts with
// "nvidia" (nvidia.yaml, nvidia.json, as nvidia-ctk names it), else it is
// another vendor's and skipped, as the runtime skips it for other kinds.
func ToolkitEdits(dirs []string, kind string) (Toolkit, error) {
	var t Toolkit
	for _, dir := range slices.Backward(dirs) {
		entries, err := os.ReadDir(dir)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return Toolkit{}, fmt.Errorf("%w: CDI spec directory %s: %w", ErrToolkitSpec, dir, err)
		}
		for _, e := range entries {
			if e.IsDir() || !isSpecFile(e.Name()) {
				continue
			}
			path := filepath.Join(dir, e.Name())
			sp, ok, err := readToolkitSpec(path, kind)
			if err != nil {
				return Toolkit{}, err
			}
			if !ok {
				continue
			}
			t.Files = append(t.Files, path)
			if err := t.Edits.merge(path, sp.ContainerEdits); err != nil {
				return Toolkit{}, err
			}
		}
	}
	return t, nil
}

// isSpecFile: a spec file a runtime reads, not one of the plugin's own.
func isSpecFile(name string) bool {
	ext := filepath.Ext(name)
	if ext != ".json" && ext != ".yaml" && ext != ".yml" || strings.HasPrefix(name, ".") {
		return false
	}
	return !slices.ContainsFunc(filePrefixes(), func(p string) bool { return strings.HasPrefix(name, p) })
}

// readToolkitSpec parses path; ok is false for another kind's spec.
func readToolkitSpec(path, kind string) (specs.Spec, bool, error) {
	var sp specs.Spec
	b, err := os.ReadFile(path)
	if err != nil {
		return sp, false, fmt.Errorf("%w: %w", ErrToolkitSpec, err)
	}
	if err := yaml.Unmarshal(b, &sp); err != nil {
		// the kind, if a looser reading finds it, says whose file it is
		var loose struct{ Kind string }
		if yaml.Unmarshal(b, &loose) == nil && loose.Kind != "" {
			if loose.Kind != kind {
				return sp, false, nil
			}
		} else if !strings.HasPrefix(filepath.Base(path), "nvidia") {
			return sp, false, nil
		}
		return sp, false, fmt.Errorf("%w %s: %w", ErrToolkitSpec, path, err)
	}
	return sp, sp.Kind == kind, nil
}

// merge adds a spec's edits after the ones already kept (from specs of
// higher priority).
func (e *ContainerEdits) merge(path string, in specs.ContainerEdits) error {
	bad := func(what string, v any) error {
		return fmt.Errorf("%w %s: spec-level containerEdits: %s %+v", ErrToolkitSpec, path, what, v)
	}
	for _, env := range in.Env {
		name, _, _ := strings.Cut(env, "=")
		if name == "" {
			return bad("env entry without a name", env)
		}
		if name == EnvVisibleDevices || slices.ContainsFunc(e.Env, func(s string) bool { return strings.HasPrefix(s, name+"=") || s == name }) {
			continue
		}
		e.Env = append(e.Env, env)
	}
	for _, n := range in.DeviceNodes {
		if n == nil || !filepath.IsAbs(n.Path) {
			return bad("device node without an absolute path", n)
		}
		if gpuNode.MatchString(n.Path) || slices.ContainsFunc(e.DeviceNodes, func(d DeviceNode) bool { return d.Path == n.Path }) {
			continue
		}
		e.DeviceNodes = append(e.DeviceNodes, DeviceNode{Path: n.Path, HostPath: n.HostPath, Type: n.Type, Major: n.Major,
			Minor: n.Minor, FileMode: n.FileMode, Permissions: n.Permissions, UID: n.UID, GID: n.GID})
	}
	for _, m := range in.Mounts {
		if m == nil || m.HostPath == "" || !filepath.IsAbs(m.ContainerPath) {
			return bad("mount without a host path and an absolute container path", m)
		}
		if slices.ContainsFunc(e.Mounts, func(k Mount) bool { return k.ContainerPath == m.ContainerPath }) {
			continue
		}
		e.Mounts = append(e.Mounts, Mount{HostPath: m.HostPath, ContainerPath: m.ContainerPath, Options: m.Options, Type: m.Type})
	}
	for _, h := range in.Hooks {
		if h == nil || h.HookName == "" || !filepath.IsAbs(h.Path) {
			return bad("hook without a name and an absolute path", h)
		}
		k := Hook{HookName: h.HookName, Path: h.Path, Args: h.Args, Env: h.Env, Timeout: h.Timeout}
		if slices.ContainsFunc(e.Hooks, func(o Hook) bool { return sameHook(o, k) }) {
			continue
		}
		e.Hooks = append(e.Hooks, k)
	}
	for _, g := range in.AdditionalGIDs {
		if !slices.Contains(e.AdditionalGIDs, g) {
			e.AdditionalGIDs = append(e.AdditionalGIDs, g)
		}
	}
	return nil
}

func sameHook(a, b Hook) bool {
	return a.HookName == b.HookName && a.Path == b.Path && slices.Equal(a.Args, b.Args) && slices.Equal(a.Env, b.Env)
}

// specVersion is the CDI version a spec with edits e needs: Version, or
// 0.7.0 for additional GIDs (intelRdt and netDevices are not carried).
func specVersion(e *ContainerEdits) string {
	if e != nil && len(e.AdditionalGIDs) > 0 {
		return "0.7.0"
	}
	return Version
}
