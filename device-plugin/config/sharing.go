package config

import (
	"cmp"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/volcano-vgpu/volcano-vgpu/api"
)

// Sharing is how each GPU of a node is shared (api.ServedModes). One
// setting for every mode: the most specific rule wins, a GPU's UUID over its
// model (the longest matching substring) over the node's name over Mode.
type Sharing struct {
	// Mode of every GPU no rule below names; default time-sliced.
	Mode api.GPUMode `json:"mode"`
	// Nodes: node name → mode of all its GPUs.
	Nodes map[string]api.GPUMode `json:"nodes,omitempty"`
	// Models: a substring of the GPU model name → mode.
	Models map[string]api.GPUMode `json:"models,omitempty"`
	// GPUs: GPU UUID → mode.
	GPUs map[string]api.GPUMode `json:"gpus,omitempty"`
}

// ModeFor is the mode of the GPU uuid (model) on node.
func (s Sharing) ModeFor(node, model, uuid string) api.GPUMode {
	if m, ok := s.GPUs[uuid]; ok {
		return m
	}
	// the longest matching substring wins; equally long ones in key order
	keys := make([]string, 0, len(s.Models))
	for k := range s.Models {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	best, mode := -1, api.GPUMode("")
	for _, k := range keys {
		if strings.Contains(model, k) && len(k) > best {
			best, mode = len(k), s.Models[k]
		}
	}
	if best >= 0 {
		return mode
	}
	if m, ok := s.Nodes[node]; ok {
		return m
	}
	if s.Mode == "" {
		return api.ModeTimeSliced
	}
	return s.Mode
}

// Uses reports whether any rule can give a GPU mode m.
func (s Sharing) Uses(m api.GPUMode) bool {
	if s.Mode == m {
		return true
	}
	for _, rules := range []map[string]api.GPUMode{s.Nodes, s.Models, s.GPUs} {
		for _, v := range rules {
			if v == m {
				return true
			}
		}
	}
	return false
}

func (s *Sharing) applyDefaults() {
	if s.Mode == "" {
		s.Mode = api.ModeTimeSliced
	}
}

func (s Sharing) validate() error {
	if _, err := api.ParseGPUMode("sharing.mode", s.Mode); err != nil {
		return err
	}
	checkMode := func(path string, m api.GPUMode) error {
		_, err := api.ParseGPUMode(path, m)
		return err
	}
	return cmp.Or(
		checkKeyed("sharing.nodes", s.Nodes, func(k string) bool { return k != "" && !strings.ContainsAny(k, " /") }, "a node name", checkMode),
		checkKeyed("sharing.models", s.Models, modelKey, "a non-empty substring of a GPU model name, such as H100", checkMode),
		checkKeyed("sharing.gpus", s.GPUs, api.ValidUUID, "a GPU UUID such as GPU-5a7c…", checkMode))
}

// modelKey: a rule keyed by a GPU model's substring.
func modelKey(k string) bool { return strings.TrimSpace(k) != "" }

// checkKeyed checks a map of rules in key order (the first error stays the
// same from run to run): each key with ok (what says what a key must be),
// each value with check, given the rule's path (key["k"]).
func checkKeyed[V any](key string, rules map[string]V, ok func(string) bool, what string, check func(path string, v V) error) error {
	for _, k := range slices.Sorted(maps.Keys(rules)) {
		if !ok(k) {
			return fmt.Errorf("%s: expected %s as the key, got %q", key, what, k)
		}
		if err := check(fmt.Sprintf("%s[%q]", key, k), rules[k]); err != nil {
			return err
		}
	}
	return nil
}

// MPS configures the MPS control daemons the plugin runs for its MPS GPUs
// (one per GPU, under stateDir/mps/<uuid>).
type MPS struct {
	// ControlCommand is nvidia-cuda-mps-control: a name looked up in PATH or
	// an absolute path.
	ControlCommand string `json:"controlCommand"`
	// SetComputeMode sets each MPS GPU's compute mode to EXCLUSIVE_PROCESS
	// through NVML (only the MPS server may then open a context on it) and
	// back to DEFAULT when the GPU leaves MPS mode. false leaves the compute
	// mode as it is (machines whose settings must not change).
	SetComputeMode *bool `json:"setComputeMode,omitempty"`
	// ProbeInterval: how often each daemon is asked for its servers.
	ProbeInterval Duration `json:"probeInterval"`
	// ProbeTimeout: how long one control command may take.
	ProbeTimeout Duration `json:"probeTimeout"`
	// ClientUID is the user the plugin starts each GPU's MPS server for (an
	// MPS server serves one user; clients of another user wait until it
	// exits). Containers on MPS GPUs must run as this user; Allocate refuses
	// those whose pod says another.
	ClientUID *int64 `json:"clientUID,omitempty"`
}

// ComputeModeEnabled reports whether mps.setComputeMode is on (default true).
func (m MPS) ComputeModeEnabled() bool { return m.SetComputeMode == nil || *m.SetComputeMode }

// UID is mps.clientUID (default 0).
func (m MPS) UID() int64 {
	if m.ClientUID == nil {
		return 0
	}
	return *m.ClientUID
}

func (m *MPS) applyDefaults() {
	def(&m.ControlCommand, "nvidia-cuda-mps-control")
	if m.SetComputeMode == nil {
		t := true
		m.SetComputeMode = &t
	}
	if m.ClientUID == nil {
		var root int64
		m.ClientUID = &root
	}
	defDuration(&m.ProbeInterval, 10*time.Second)
	defDuration(&m.ProbeTimeout, 5*time.Second)
}

func (m MPS) validate() error {
	for _, d := range []struct {
		key string
		d   Duration
	}{{"mps.probeInterval", m.ProbeInterval}, {"mps.probeTimeout", m.ProbeTimeout}} {
		if d.d.Invalid != "" {
			return fmt.Errorf("%s: expected a duration such as 10s, got %s", d.key, d.d.Invalid)
		}
	}
	switch {
	case m.ControlCommand == "" || strings.Contains(m.ControlCommand, "/") && !filepath.IsAbs(m.ControlCommand):
		return fmt.Errorf("mps.controlCommand: expected a command name found in PATH or an absolute path, got %q", m.ControlCommand)
	case m.ProbeInterval.Duration < time.Second || m.ProbeInterval.Duration > 10*time.Minute:
		return fmt.Errorf("mps.probeInterval: expected 1s to 10m, got %s", m.ProbeInterval.Duration)
	case m.ProbeTimeout.Duration < 100*time.Millisecond || m.ProbeTimeout.Duration > time.Minute:
		return fmt.Errorf("mps.probeTimeout: expected 100ms to 1m, got %s", m.ProbeTimeout.Duration)
	case m.ClientUID != nil && (*m.ClientUID < 0 || *m.ClientUID > 1<<31-2):
		return fmt.Errorf("mps.clientUID: expected a user ID from 0 to %d, got %d", 1<<31-2, *m.ClientUID)
	}
	return nil
}
