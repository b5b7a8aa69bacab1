package cdi

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Version is the CDI specification version of the plugin's own specs: the
// hooks and names used here exist since 0.5.0, which every CDI-capable
// containerd (1.7+) and CRI-O read.
const Version = "0.5.0"

// HookTimeoutSeconds bounds the createRuntime hook (it reads two small files).
const HookTimeoutSeconds = 10

// Spec is one CDI spec file (the subset the plugin writes).
type Spec struct {
	CDIVersion string   `json:"cdiVersion"`
	Kind       string   `json:"kind"`
	Devices    []Device `json:"devices"`
	// ContainerEdits apply once when any device of the spec is injected
	// (the driver's libraries and hooks in the MIG spec, ToolkitEdits).
	ContainerEdits *ContainerEdits `json:"containerEdits,omitempty"`
}

// Device is one named device and its container edits.
type Device struct {
	Name           string         `json:"name"`
	ContainerEdits ContainerEdits `json:"containerEdits"`
}

// ContainerEdits are what the runtime applies for a device.
type ContainerEdits struct {
	Env            []string     `json:"env,omitempty"`
	DeviceNodes    []DeviceNode `json:"deviceNodes,omitempty"`
	Hooks          []Hook       `json:"hooks,omitempty"`
	Mounts         []Mount      `json:"mounts,omitempty"`
	AdditionalGIDs []uint32     `json:"additionalGids,omitempty"` // CDI 0.7.0
}

// DeviceNode is a device node the runtime creates in the container. With
// Path alone it is the host's node at the same path (the runtime reads its
// type and numbers); the other fields are as the toolkit's spec gives them.
type DeviceNode struct {
	Path        string       `json:"path"`
	HostPath    string       `json:"hostPath,omitempty"`
	Type        string       `json:"type,omitempty"`
	Major       int64        `json:"major,omitempty"`
	Minor       int64        `json:"minor,omitempty"`
	FileMode    *os.FileMode `json:"fileMode,omitempty"`
	Permissions string       `json:"permissions,omitempty"`
	UID         *uint32      `json:"uid,omitempty"`
	GID         *uint32      `json:"gid,omitempty"`
}

// Mount is a bind mount (or one of Type) of HostPath at ContainerPath.
type Mount struct {
	HostPath      string   `json:"hostPath"`
	ContainerPath string   `json:"containerPath"`
	Options       []string `json:"options,omitempty"`
	Type          string   `json:"type,omitempty"`
}

// Hook is an OCI hook: Path runs with Args (Args[0] is argv[0]).
type Hook struct {
	HookName string   `json:"hookName"`
	Path     string   `json:"path"`
	Args     []string `json:"args,omitempty"`
	Env      []string `json:"env,omitempty"`
	Timeout  *int     `json:"timeout,omitempty"`
}

// CreateRuntime is the OCI hook that runs in the runtime's namespaces after
// the container's mounts are prepared and before pivot_root: the image's
// root file system is visible there as the image has it.
const CreateRuntime = "createRuntime"

// Specs is the directory the runtime reads specs from (host path).
type Specs struct{ Dir string }

// filePrefixes start the names of the plugin's spec files, one per kind,
// each followed by <podUID>_<container>.json.
const (
	filePrefix    = "volcano-vgpu.io-limiter_"
	migFilePrefix = "volcano-vgpu.io-mig_"
)

func filePrefixes() []string { return []string{filePrefix, migFilePrefix} }

// LimiterDevice is the device name of one container: <podUID>_<container>.
func LimiterDevice(podUID, container string) (string, error) {
	name := podUID + "_" + container
	if err := ValidateDeviceName(name); err != nil {
		return "", err
	}
	return name, nil
}

func (s Specs) file(device string) string { return filepath.Join(s.Dir, filePrefix+device+".json") }

// WriteLimiter writes the spec of one container's limiter device with its
// hooks and returns the device's qualified name. It replaces an earlier
// spec of the same container atomically (the runtime may read at any time).
func (s Specs) WriteLimiter(podUID, container string, hooks ...Hook) (string, error) {
	dev, err := LimiterDevice(podUID, container)
	if err != nil {
		return "", err
	}
	for _, h := range hooks {
		if !filepath.IsAbs(h.Path) || h.HookName == "" {
			return "", fmt.Errorf("CDI hook %q: expected a hook name and an absolute path on the host", h.Path)
		}
	}
	sp := Spec{CDIVersion: Version, Kind: LimiterKind, Devices: []Device{{Name: dev, ContainerEdits: ContainerEdits{Hooks: hooks}}}}
	if err := s.write(s.file(dev), sp); err != nil {
		return "", err
	}
	return LimiterKind + "=" + dev, nil
}

// write replaces the spec file path with sp atomically (the runtime may
// read at any time).
func (s Specs) write(path string, sp Spec) error {
	b, err := json.MarshalIndent(sp, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(s.Dir, 0o755); err != nil {
		return fmt.Errorf("CDI spec directory (cdi.specDir): %w", err)
	}
	// The temporary name does not end in .json: a runtime watching the
	// directory never parses a half-written spec.
	tmp, err := os.CreateTemp(s.Dir, ".volcano-vgpu.io_*.tmp")
	if err != nil {
		return fmt.Errorf("CDI spec directory (cdi.specDir): %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(append(b, '\n')); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// Read reads back the spec of one container (tests and the emulators).
func (s Specs) Read(podUID, container string) (Spec, error) {
	var sp Spec
	dev, err := LimiterDevice(podUID, container)
	if err != nil {
		return sp, err
	}
	return readSpec(s.file(dev))
}

func readSpec(path string) (Spec, error) {
	var sp Spec
	b, err := os.ReadFile(path)
	if err != nil {
		return sp, err
	}
	return sp, json.Unmarshal(b, &sp)
}

// Pods lists the pod UIDs that have specs (of any kind) here, sorted.
func (s Specs) Pods() ([]string, error) {
	entries, err := os.ReadDir(s.Dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	var out []string
	for _, e := range entries {
		for _, prefix := range filePrefixes() {
			rest, ok := strings.CutPrefix(e.Name(), prefix)
			if !ok || !strings.HasSuffix(rest, ".json") {
				continue
			}
			uid, _, ok := strings.Cut(rest, "_")
			if ok && !seen[uid] {
				seen[uid] = true
				out = append(out, uid)
			}
		}
	}
	slices.Sort(out)
	return out, nil
}

// Remove deletes the specs (every kind) of every container of a pod.
func (s Specs) Remove(podUID string) error {
	if strings.ContainsAny(podUID, "/_*?[") || podUID == "" {
		return fmt.Errorf("pod UID %q: not a UID", podUID)
	}
	var files []string
	for _, prefix := range filePrefixes() {
		f, err := filepath.Glob(filepath.Join(s.Dir, prefix+podUID+"_*.json"))
		if err != nil {
			return err
		}
		files = append(files, f...)
	}
	var errs []error
	for _, f := range files {
		if err := os.Remove(f); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
