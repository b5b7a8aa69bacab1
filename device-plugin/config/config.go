// Package config is the device plugin's configuration file: versioned,
// strict (unknown keys are errors that name the key), defaulted and
// validated once at startup. Every error names the setting and the fix.
package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	sigsjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	"github.com/volcano-vgpu/volcano-vgpu/api"
)

// Version is the only accepted config version.
const Version = "v1"

// MaxSocketPath is the longest unix socket path Linux accepts (sun_path is
// 108 bytes including the terminating NUL).
const MaxSocketPath = 107

// Config is the whole file.
type Config struct {
	Version string `json:"version"`
	// ResourceNames: the extended resources (vgpu-number is registered with
	// kubelet, memory and cores are published on the node).
	ResourceNames api.ResourceNames `json:"resourceNames"`
	Kubelet       Kubelet           `json:"kubelet"`
	Limiter       Limiter           `json:"limiter"`
	Health        Health            `json:"health"`
	Report        Report            `json:"report"`
	Allocate      Allocate          `json:"allocate"`
	CDI           CDI               `json:"cdi"`
	MemoryGuard   MemoryGuard       `json:"memoryGuard"`
	// Sharing is each GPU's sharing mode (time-sliced, mps or mig).
	Sharing Sharing `json:"sharing"`
	// MIG: the fixed geometries of MIG GPUs (the others are on-demand).
	MIG MIG `json:"mig"`
	// MPS runs the MPS control daemons of the MPS GPUs.
	MPS MPS `json:"mps"`
	// MaxShares is the number of containers one GPU can serve (vgpu-number
	// replicas per GPU). Simulated nodes carry their own value instead.
	MaxShares int `json:"maxShares"`
	// StateDir holds the per-container limiter files (host path).
	StateDir string `json:"stateDir"`
	// DefaultComputePolicy applies when neither the pod nor the node says.
	DefaultComputePolicy api.ComputePolicy `json:"defaultComputePolicy"`
	// MetricsAddress serves /metrics; empty disables.
	MetricsAddress string `json:"metricsAddress"`
}

// Kubelet holds the kubelet's paths.
type Kubelet struct {
	DevicePluginsDir   string `json:"devicePluginsDir"`
	KubeletSocket      string `json:"kubeletSocket"` // default <devicePluginsDir>/kubelet.sock
	SocketName         string `json:"socketName"`    // our socket, inside devicePluginsDir
	PodResourcesSocket string `json:"podResourcesSocket"`
}

// Limiter says what the containers get mounted.
type Limiter struct {
	HostLibrary      string `json:"hostLibrary"`      // libvcuda.so on the host
	ContainerLibrary string `json:"containerLibrary"` // where it appears in the container
	ConfigPath       string `json:"configPath"`       // limiter config inside the container
	SharedDir        string `json:"sharedDir"`        // cross-process accounting dir inside the container
	// Preload mounts a host file listing ContainerLibrary at /etc/ld.so.preload.
	Preload *bool `json:"preload,omitempty"`
	// ContextMiB is the device memory one CUDA context takes, by GPU model:
	// a substring of the model name (the longest that matches wins) or
	// "default". The limiter counts it against a container's memory cap for
	// every context a process opens, so that the caps of a GPU's tenants plus
	// their contexts fit the card. Absent or 0: not counted. Models measured
	// on a real card (MeasuredContextMiB) are filled in unless named here.
	ContextMiB map[string]uint32 `json:"contextMiB,omitempty"`
	// ConfineSlots: where every tenant active on a GPU is held to a rate,
	// each launches only within its slot of every 1/30 s, so that their
	// queues take turns instead of time-slicing (docs/limiter.md). Default
	// true; false: the slots only say when each tenant's credit comes.
	ConfineSlots *bool `json:"confineSlots,omitempty"`
}

// MeasuredContextMiB is limiter.contextMiB for the models whose context the
// gpu bundle measured (the largest of its programs': PyTorch's), which the
// defaults fill in for every model the configuration does not name. NVIDIA
// H200, driver 580.159.04, CUDA 13.0: PyTorch 2.11 612 MiB, CuPy 14.2 and
// the CUDA C probe 520 (2026-11-27, twice).
func MeasuredContextMiB() map[string]uint32 {
	return map[string]uint32{"H200": 612}
}

// maxContextMiB bounds limiter.contextMiB (a context is hundreds of MiB).
const maxContextMiB = 16384

// ContextMiBFor is limiter.contextMiB for a GPU model.
func (l Limiter) ContextMiBFor(model string) uint32 {
	best, v := -1, l.ContextMiB["default"]
	for k, mib := range l.ContextMiB {
		if k != "default" && strings.Contains(model, k) && len(k) > best {
			best, v = len(k), mib
		}
	}
	return v
}

// Health configures Xid handling.
type Health struct {
	Disabled    bool     `json:"disabled"`
	IgnoredXIDs []uint64 `json:"ignoredXIDs"`
	// RecoveryPeriod: the quiet period. A GPU made unhealthy by a critical
	// Xid or a failed probe is healthy again only once a probe through NVML
	// passes and no critical Xid or failed probe came for this long.
	RecoveryPeriod Duration `json:"recoveryPeriod"`
	// ProbeInterval: how often every GPU is probed (handle, memory, PCI,
	// pending row remapping).
	ProbeInterval Duration `json:"probeInterval"`
}

// Report configures the node annotations.
type Report struct {
	HeartbeatPeriod Duration `json:"heartbeatPeriod"`
	// HAMi also publishes volcano.sh/node-vgpu-register and answers the
	// handshake, so Volcano's deviceshare plugin can use the node.
	HAMi bool `json:"hami"`
}

// Allocate configures the kubelet-facing side.
type Allocate struct {
	// AssignmentWait: how long Allocate waits for a pod's assignment to reach
	// the plugin's cache before refusing (the informer may lag kubelet).
	AssignmentWait Duration `json:"assignmentWait"`
	// GCPeriod: how often limiter files of deleted pods are removed.
	GCPeriod Duration `json:"gcPeriod"`
	// Reschedule: delete the pods kubelet failed at admission because
	// Allocate refused them (after an Event saying why), so that their
	// controller creates them again and the scheduler places them anew.
	// Kubelet never retries such a pod. Off by default: it deletes pods.
	Reschedule bool `json:"reschedule"`
}

// MemoryGuard is the node's check of what each container's processes hold
// on each GPU (NVML, by host pid and cgroup) against its memory cap: a
// container over its cap loses its largest holder (SIGKILL) and its pod gets
// a Warning Event. It needs the host's pid namespace (hostPID) and CAP_KILL.
type MemoryGuard struct {
	// Disabled turns the guard off: caps are then only what libvcuda enforces
	// inside the containers, which a tenant can get around.
	Disabled bool `json:"disabled"`
	// Period: how often every GPU is checked (a tenant over its cap is caught
	// within one period).
	Period Duration `json:"period"`
	// ToleranceMiB a container may hold above its cap and contexts on one GPU
	// (driver rounding); 0: the default.
	ToleranceMiB int64 `json:"toleranceMiB"`
	// UncountedContextMiB is allowed per process on a GPU model whose context
	// size limiter.contextMiB does not count (0 there): a real context takes
	// device memory the cap does not include. 0: the default.
	UncountedContextMiB int64 `json:"uncountedContextMiB"`
	// UnlimitedProcesses is what the guard does about a process that runs
	// without libvcuda (no executable mapping of it in /proc/<pid>/maps) on
	// a GPU where its container's compute share is enforced by libvcuda:
	// report (a Warning Event on the pod, a metric), kill (those, and
	// SIGKILL) or ignore. "": report.
	UnlimitedProcesses UnlimitedAction `json:"unlimitedProcesses"`
}

// UnlimitedAction is memoryGuard.unlimitedProcesses.
type UnlimitedAction string

// The values of memoryGuard.unlimitedProcesses.
const (
	UnlimitedReport UnlimitedAction = "report"
	UnlimitedKill   UnlimitedAction = "kill"
	UnlimitedIgnore UnlimitedAction = "ignore"
)

// DefaultIgnoredXIDs are application errors that say nothing about the GPU.
var DefaultIgnoredXIDs = []uint64{13, 31, 43, 45, 68, 109}

// Default returns the configuration used when no file is given.
func Default() Config {
	c := Config{Version: Version}
	c.applyDefaults()
	return c
}

// Load reads, defaults and validates a file.
func Load(path string) (Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("device plugin config: %w (give --config a readable file, or omit it for the defaults)", err)
	}
	c, err := Parse(data)
	if err != nil {
		return Config{}, fmt.Errorf("device plugin config %s: %w", path, err)
	}
	return c, nil
}

// Parse decodes strictly (keys are case-sensitive; unknown and duplicate
// keys are errors), then defaults and validates.
func Parse(data []byte) (Config, error) {
	var c Config
	js, err := yaml.YAMLToJSONStrict(bytes.TrimSpace(data))
	if err != nil {
		return Config{}, fmt.Errorf("not valid YAML: %w", err)
	}
	strict, err := sigsjson.UnmarshalStrict(js, &c)
	if err != nil {
		return Config{}, fmt.Errorf("%w (fix the value's type)", err)
	}
	if len(strict) > 0 {
		return Config{}, fmt.Errorf("%w (remove or fix the key; testdata/example.yaml in package config lists every key)", errors.Join(strict...))
	}
	if c.Version != Version {
		return Config{}, fmt.Errorf("version: expected %q, got %q (this build reads only %s)", Version, c.Version, Version)
	}
	c.applyDefaults()
	return c, c.Validate()
}

func (c *Config) applyDefaults() {
	if c.ResourceNames == (api.ResourceNames{}) {
		c.ResourceNames = api.DefaultResourceNames()
	}
	k := &c.Kubelet
	def(&k.DevicePluginsDir, strings.TrimSuffix(pluginapi.DevicePluginPath, "/"))
	def(&k.KubeletSocket, filepath.Join(k.DevicePluginsDir, "kubelet.sock"))
	def(&k.SocketName, "volcano-vgpu.sock")
	def(&k.PodResourcesSocket, "/var/lib/kubelet/pod-resources/kubelet.sock")
	l := &c.Limiter
	def(&l.HostLibrary, "/usr/local/volcano-vgpu/libvcuda.so")
	def(&l.ContainerLibrary, "/usr/local/volcano-vgpu/libvcuda.so")
	def(&l.ConfigPath, api.LimiterConfigPath)
	def(&l.SharedDir, "/var/run/vcuda")
	if l.Preload == nil {
		t := true
		l.Preload = &t
	}
	if l.ConfineSlots == nil {
		t := true
		l.ConfineSlots = &t
	}
	if l.ContextMiB == nil {
		l.ContextMiB = map[string]uint32{}
	}
	if _, ok := l.ContextMiB["default"]; !ok {
		l.ContextMiB["default"] = 0
	}
	for model, mib := range MeasuredContextMiB() {
		if _, named := l.ContextMiB[model]; !named {
			l.ContextMiB[model] = mib
		}
	}
	c.CDI.applyDefaults()
	c.Sharing.applyDefaults()
	c.MPS.applyDefaults()
	if c.Health.IgnoredXIDs == nil {
		c.Health.IgnoredXIDs = append([]uint64(nil), DefaultIgnoredXIDs...)
	}
	defDuration(&c.Health.RecoveryPeriod, 5*time.Minute)
	defDuration(&c.Health.ProbeInterval, 30*time.Second)
	defDuration(&c.Report.HeartbeatPeriod, time.Minute)
	defDuration(&c.Allocate.AssignmentWait, 10*time.Second)
	defDuration(&c.Allocate.GCPeriod, time.Minute)
	defDuration(&c.MemoryGuard.Period, 2*time.Second)
	if c.MemoryGuard.ToleranceMiB == 0 {
		c.MemoryGuard.ToleranceMiB = 64
	}
	if c.MemoryGuard.UncountedContextMiB == 0 {
		c.MemoryGuard.UncountedContextMiB = 1024
	}
	if c.MemoryGuard.UnlimitedProcesses == "" {
		c.MemoryGuard.UnlimitedProcesses = UnlimitedReport
	}
	if c.MaxShares == 0 {
		c.MaxShares = 10
	}
	def(&c.StateDir, "/var/lib/volcano-vgpu")
	if c.DefaultComputePolicy == "" {
		c.DefaultComputePolicy = api.ComputeFixed
	}
	def(&c.MetricsAddress, ":9394")
}

func def(s *string, v string) {
	if *s == "" {
		*s = v
	}
}

func defDuration(d *Duration, v time.Duration) {
	if d.Duration == 0 {
		d.Duration = v
	}
}

// PluginSocket is the path of the plugin's own socket.
func (c *Config) PluginSocket() string {
	return filepath.Join(c.Kubelet.DevicePluginsDir, c.Kubelet.SocketName)
}

// SlotsConfine reports whether launch slots confine (limiter.confineSlots).
func (c *Config) SlotsConfine() bool { return c.Limiter.ConfineSlots == nil || *c.Limiter.ConfineSlots }

// PreloadEnabled reports whether /etc/ld.so.preload is mounted.
func (c *Config) PreloadEnabled() bool { return c.Limiter.Preload == nil || *c.Limiter.Preload }

// Validate checks every setting; call it again after flags change paths.
func (c *Config) Validate() error {
	for _, d := range []struct {
		key string
		d   Duration
	}{
		{"health.recoveryPeriod", c.Health.RecoveryPeriod}, {"health.probeInterval", c.Health.ProbeInterval}, {"report.heartbeatPeriod", c.Report.HeartbeatPeriod},
		{"allocate.assignmentWait", c.Allocate.AssignmentWait}, {"allocate.gcPeriod", c.Allocate.GCPeriod},
		{"memoryGuard.period", c.MemoryGuard.Period},
	} {
		if d.d.Invalid != "" {
			return fmt.Errorf("%s: expected a duration such as 30s or 5m, got %s", d.key, d.d.Invalid)
		}
	}
	if err := c.ResourceNames.Validate(); err != nil {
		return fmt.Errorf("resourceNames: %w", err)
	}
	for _, p := range []struct{ key, path string }{
		{"kubelet.devicePluginsDir", c.Kubelet.DevicePluginsDir},
		{"kubelet.kubeletSocket", c.Kubelet.KubeletSocket},
		{"kubelet.podResourcesSocket", c.Kubelet.PodResourcesSocket},
		{"limiter.hostLibrary", c.Limiter.HostLibrary},
		{"limiter.containerLibrary", c.Limiter.ContainerLibrary},
		{"limiter.configPath", c.Limiter.ConfigPath},
		{"limiter.sharedDir", c.Limiter.SharedDir},
		{"stateDir", c.StateDir},
	} {
		if !filepath.IsAbs(p.path) {
			return fmt.Errorf("%s: expected an absolute path, got %q", p.key, p.path)
		}
	}
	if s := c.Kubelet.SocketName; strings.ContainsRune(s, '/') || s == "." || s == ".." || s == "kubelet.sock" {
		return fmt.Errorf("kubelet.socketName: expected a plain file name other than kubelet.sock, got %q", s)
	}
	for _, p := range []struct{ key, path string }{
		{"kubelet.kubeletSocket", c.Kubelet.KubeletSocket},
		{"kubelet.devicePluginsDir + kubelet.socketName", c.PluginSocket()},
		{"kubelet.podResourcesSocket", c.Kubelet.PodResourcesSocket},
	} {
		if err := CheckSocketPath(p.key, p.path); err != nil {
			return err
		}
	}
	for k, v := range c.Limiter.ContextMiB {
		if k == "" || v > maxContextMiB {
			return fmt.Errorf("limiter.contextMiB: expected a GPU model substring or \"default\" with 0 to %d MiB, got %q: %d", maxContextMiB, k, v)
		}
	}
	if err := c.CDI.validate(); err != nil {
		return err
	}
	if err := c.Sharing.validate(); err != nil {
		return err
	}
	if err := c.MPS.validate(); err != nil {
		return err
	}
	if err := c.MIG.validate(c.Sharing); err != nil {
		return err
	}
	if _, err := api.ParseComputePolicy("defaultComputePolicy", string(c.DefaultComputePolicy)); err != nil {
		return err
	}
	switch {
	case c.MaxShares < 1 || c.MaxShares > api.MaxShares:
		return fmt.Errorf("maxShares: expected 1 to %d containers per GPU, got %d", api.MaxShares, c.MaxShares)
	case c.Health.RecoveryPeriod.Duration < 0:
		return fmt.Errorf("health.recoveryPeriod: expected a positive duration such as 5m, got %s", c.Health.RecoveryPeriod.Duration)
	case c.Health.ProbeInterval.Duration < time.Second || c.Health.ProbeInterval.Duration > 10*time.Minute:
		return fmt.Errorf("health.probeInterval: expected 1s to 10m, got %s", c.Health.ProbeInterval.Duration)
	case c.Report.HeartbeatPeriod.Duration < time.Second:
		return fmt.Errorf("report.heartbeatPeriod: expected at least 1s, got %s", c.Report.HeartbeatPeriod.Duration)
	case c.Allocate.AssignmentWait.Duration < 0:
		return fmt.Errorf("allocate.assignmentWait: expected a non-negative duration, got %s", c.Allocate.AssignmentWait.Duration)
	case c.Allocate.GCPeriod.Duration < time.Second:
		return fmt.Errorf("allocate.gcPeriod: expected at least 1s, got %s", c.Allocate.GCPeriod.Duration)
	case c.MemoryGuard.Period.Duration < 100*time.Millisecond || c.MemoryGuard.Period.Duration > 10*time.Minute:
		return fmt.Errorf("memoryGuard.period: expected 100ms to 10m, got %s (a tenant over its cap holds the memory up to one period)", c.MemoryGuard.Period.Duration)
	case c.MemoryGuard.ToleranceMiB < 0 || c.MemoryGuard.ToleranceMiB > 65536:
		return fmt.Errorf("memoryGuard.toleranceMiB: expected 1 to 65536 MiB (0 for the default, 64), got %d", c.MemoryGuard.ToleranceMiB)
	case c.MemoryGuard.UncountedContextMiB < 0 || c.MemoryGuard.UncountedContextMiB > maxContextMiB:
		return fmt.Errorf("memoryGuard.uncountedContextMiB: expected 1 to %d MiB (0 for the default, 1024), got %d", maxContextMiB, c.MemoryGuard.UncountedContextMiB)
	case c.MemoryGuard.UnlimitedProcesses != UnlimitedReport && c.MemoryGuard.UnlimitedProcesses != UnlimitedKill && c.MemoryGuard.UnlimitedProcesses != UnlimitedIgnore:
		return fmt.Errorf("memoryGuard.unlimitedProcesses: expected report, kill or ignore, got %q", c.MemoryGuard.UnlimitedProcesses)
	}
	return nil
}

// CheckSocketPath rejects unix socket paths the kernel cannot bind.
func CheckSocketPath(key, path string) error {
	if len(path) > MaxSocketPath {
		return fmt.Errorf("%s: the unix socket path %q is %d bytes; Linux allows at most %d: use a shorter directory", key, path, len(path), MaxSocketPath)
	}
	return nil
}

// Duration is a time.Duration written as "30s" or "5m". A value that does
// not parse is kept in Invalid, so Validate can name its key.
type Duration struct {
	time.Duration
	Invalid string `json:"-"`
}

// UnmarshalJSON never fails; see Invalid.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		d.Invalid = string(b)
		return nil
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		d.Invalid = fmt.Sprintf("%q", s)
		return nil
	}
	d.Duration, d.Invalid = v, ""
	return nil
}

// MarshalJSON writes the duration as a string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(d.Duration.String()) }
