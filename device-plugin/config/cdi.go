package config

import (
	"fmt"
	"path/filepath"

	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/cdi"
)

// CDI says how Allocate hands the GPUs to the container runtime.
type CDI struct {
	// Enabled: answer with CDI device names that the runtime resolves
	// against the NVIDIA Container Toolkit's CDI spec (containerd 1.7+ and
	// CRI-O with CDI). false is env mode, for legacy runtimes with the NVIDIA
	// runtime hook: NVIDIA_VISIBLE_DEVICES names the GPUs. Default true.
	Enabled *bool `json:"enabled,omitempty"`
	// Kind is the CDI kind of whole GPUs (vendor/class).
	Kind string `json:"kind"`
	// DeviceNames: "uuid" (kind=GPU-…) or "index" (kind=0), as the
	// toolkit's spec names them.
	DeviceNames string `json:"deviceNames"`
	// Annotations also passes the names as a cdi.k8s.io/ container
	// annotation, for runtimes that read CDI only from annotations, not from
	// the CRI request. Leave it off where the runtime reads the CRI request:
	// it would inject the devices twice.
	Annotations bool `json:"annotations"`
	// SpecDir is where the plugin writes its own CDI specs (host path the
	// runtime reads).
	SpecDir string `json:"specDir"`
	// KeepImagePreload adds a per-container CDI device whose createRuntime
	// hook (HookPath) writes the container's ld.so.preload as libvcuda.so
	// followed by the image's own entries. Default true.
	KeepImagePreload *bool `json:"keepImagePreload,omitempty"`
	// HookPath is vgpu-cdi-hook on the host (the runtime runs it).
	HookPath string `json:"hookPath"`
	// MIGMinors is the driver's list of MIG capability minors
	// (/proc/driver/nvidia-caps/mig-minors on the host): the device nodes of
	// the MIG devices the plugin names in its own CDI specs come from it.
	MIGMinors string `json:"migMinors"`
	// ToolkitSpecDirs are where the NVIDIA toolkit's CDI spec (of Kind) is
	// read from, lowest priority first, as the runtime reads them: its
	// spec-level edits (the driver's libraries and hooks) are copied into
	// the plugin's spec of a container's MIG devices. Directories that do
	// not exist in the plugin's container are skipped.
	ToolkitSpecDirs []string `json:"toolkitSpecDirs"`
}

func (c *CDI) applyDefaults() {
	t := true
	if c.Enabled == nil {
		c.Enabled = &t
	}
	if c.KeepImagePreload == nil {
		c.KeepImagePreload = &t
	}
	def(&c.Kind, cdi.DefaultKind)
	def(&c.DeviceNames, string(cdi.ByUUID))
	def(&c.SpecDir, cdi.DefaultSpecDir)
	def(&c.HookPath, "/usr/local/volcano-vgpu/vgpu-cdi-hook")
	def(&c.MIGMinors, cdi.DefaultMIGMinors)
	if c.ToolkitSpecDirs == nil {
		c.ToolkitSpecDirs = cdi.DefaultToolkitSpecDirs()
	}
}

// On reports CDI mode.
func (c CDI) On() bool { return c.Enabled == nil || *c.Enabled }

// KeepsPreload reports whether the plugin writes its own CDI spec with the
// preload hook (CDI mode only).
func (c CDI) KeepsPreload() bool { return c.On() && (c.KeepImagePreload == nil || *c.KeepImagePreload) }

// Strategy is DeviceNames, validated.
func (c CDI) Strategy() cdi.Strategy { return cdi.Strategy(c.DeviceNames) }

func (c CDI) validate() error {
	if err := cdi.ValidateKind(c.Kind); err != nil {
		return fmt.Errorf("cdi.kind: %w (the NVIDIA Container Toolkit's kind is %s)", err, cdi.DefaultKind)
	}
	if c.Kind == cdi.LimiterKind || c.Kind == cdi.MIGKind {
		return fmt.Errorf("cdi.kind: %s is the plugin's own kind; use the GPUs' kind, such as %s", c.Kind, cdi.DefaultKind)
	}
	if _, err := cdi.ParseStrategy("cdi.deviceNames", c.DeviceNames); err != nil {
		return err
	}
	paths := []struct{ key, path string }{{"cdi.specDir", c.SpecDir}, {"cdi.hookPath", c.HookPath}, {"cdi.migMinors", c.MIGMinors}}
	for i, d := range c.ToolkitSpecDirs {
		paths = append(paths, struct{ key, path string }{fmt.Sprintf("cdi.toolkitSpecDirs[%d]", i), d})
	}
	for _, p := range paths {
		if !filepath.IsAbs(p.path) {
			return fmt.Errorf("%s: expected an absolute path on the host, got %q", p.key, p.path)
		}
	}
	return nil
}
