package api

import (
	"fmt"
	"strings"
)

// Pod annotations of Volcano's deviceshare (v1.14–v1.16) that a user sets,
// honoured with deviceshare's meaning so its Job specs run unchanged. Every
// other key under VolcanoVGPUPrefix is refused, so a typo or a key of a later
// Volcano does not silently do nothing.
const (
	// VolcanoVGPUPrefix is the prefix of deviceshare's vGPU annotation keys.
	VolcanoVGPUPrefix = "volcano.sh/vgpu-"
	// VolcanoModeKey: the sharing mode the pod's GPUs must be in, in
	// Volcano's spelling (hami-core, mps, mig); unset, any mode.
	VolcanoModeKey = VolcanoVGPUPrefix + "mode"
	// VolcanoUUIDIncludeKey / VolcanoUUIDExcludeKey (Volcano v1.16):
	// comma-separated GPU UUIDs the pod may use / must not use; both apply,
	// the exclude list wins.
	VolcanoUUIDIncludeKey = VolcanoVGPUPrefix + "use-gpuuuid"
	VolcanoUUIDExcludeKey = VolcanoVGPUPrefix + "nouse-gpuuuid"
	// VolcanoPodGroupPolicyKey (Volcano v1.15): "spread" keeps the pods of
	// one PodGroup off each other's GPUs.
	VolcanoPodGroupPolicyKey = VolcanoVGPUPrefix + "podgroup-policy"
	// VolcanoPodGroupSpread is the one value VolcanoPodGroupPolicyKey has.
	VolcanoPodGroupSpread = "spread"
)

// DeviceShareOutputKeys returns the pod annotations deviceshare writes when
// it places a pod (its assignment, in HAMi's format). This scheduler neither
// reads nor writes them; a pod migrated from deviceshare that still carries
// them is not refused for it.
func DeviceShareOutputKeys() []string {
	return []string{
		VolcanoVGPUPrefix + "ids-new", VolcanoVGPUPrefix + "node", VolcanoVGPUPrefix + "time",
		"volcano.sh/devices-to-allocate", "volcano.sh/bind-time", "volcano.sh/bind-phase",
	}
}

func deviceShareOutput(key string) bool {
	switch key {
	case VolcanoVGPUPrefix + "ids-new", VolcanoVGPUPrefix + "node", VolcanoVGPUPrefix + "time",
		"volcano.sh/devices-to-allocate", "volcano.sh/bind-time", "volcano.sh/bind-phase":
		return true
	}
	return false
}

// DeviceShareTypePrefix is what deviceshare's GPU type adds before the model
// NVML reports (HAMi registers "NVIDIA-NVIDIA A100-SXM4-80GB"), so specs
// written for it spell types that way.
const DeviceShareTypePrefix = "NVIDIA-"

// ModelMatches reports whether a GPU type filter matches a GPU model: a
// case-insensitive substring of the model as NVML reports it ("A100",
// "NVIDIA A100") or of deviceshare's type, the model after
// DeviceShareTypePrefix ("NVIDIA-NVIDIA A100"). It does not allocate.
func ModelMatches(model, filter string) bool {
	n := len(DeviceShareTypePrefix) + len(model)
	at := func(i int) byte {
		if i < len(DeviceShareTypePrefix) {
			return DeviceShareTypePrefix[i]
		}
		return model[i-len(DeviceShareTypePrefix)]
	}
	for i := 0; i+len(filter) <= n; i++ {
		j := 0
		for ; j < len(filter); j++ {
			if lowerASCII(at(i+j)) != lowerASCII(filter[j]) {
				break
			}
		}
		if j == len(filter) {
			return true
		}
	}
	return false
}

func lowerASCII(b byte) byte {
	if 'A' <= b && b <= 'Z' {
		return b + 'a' - 'A'
	}
	return b
}

// GPUMode is how a GPU is shared between its tenants: one vocabulary from
// the device plugin's configuration and the node inventory to the pod
// annotation (Volcano's spellings) and the placement core. The device
// plugin serves every mode (ServedModes); a MIG GPU's inventory carries its
// MIG state.
type GPUMode string

const (
	// ModeTimeSliced: tenants take turns, memory and compute capped by
	// libvcuda and the node's controller. Volcano calls it hami-core.
	ModeTimeSliced GPUMode = "time-sliced"
	// ModeMPS: NVIDIA MPS partitions the GPU's SMs between tenants.
	ModeMPS GPUMode = "mps"
	// ModeMIG: the GPU is split into MIG instances.
	ModeMIG GPUMode = "mig"
)

type modeSpelling struct {
	mode    GPUMode
	volcano string
}

// volcanoModes pairs each mode with its spelling under VolcanoModeKey.
func volcanoModes() [3]modeSpelling {
	return [...]modeSpelling{{ModeTimeSliced, "hami-core"}, {ModeMPS, "mps"}, {ModeMIG, "mig"}}
}

// Volcano is the mode as VolcanoModeKey spells it.
func (m GPUMode) Volcano() string {
	for _, v := range volcanoModes() {
		if v.mode == m {
			return v.volcano
		}
	}
	return string(m)
}

// String names the mode for a person: "mig", "time-sliced (hami-core)".
func (m GPUMode) String() string {
	if v := m.Volcano(); v != string(m) {
		return fmt.Sprintf("%s (%s)", string(m), v)
	}
	return string(m)
}

// ServedModes are the modes the device plugin can run a GPU in, in the order
// its configuration lists them.
func ServedModes() []GPUMode { return []GPUMode{ModeTimeSliced, ModeMPS, ModeMIG} }

// ParseGPUMode reads a mode as the device plugin's configuration and the
// node inventory spell it (ServedModes), found under key.
func ParseGPUMode(key string, v GPUMode) (GPUMode, error) {
	names := make([]string, 0, len(ServedModes()))
	for _, m := range ServedModes() {
		if v == m {
			return m, nil
		}
		names = append(names, string(m))
	}
	return "", fieldErr(key, "", "one of "+strings.Join(names, ", "), fmt.Sprintf("%q", v))
}

// ParseVolcanoMode reads a value of VolcanoModeKey found under key.
func ParseVolcanoMode(key, v string) (GPUMode, error) {
	modes := volcanoModes()
	names := make([]string, len(modes))
	for i, m := range modes {
		if strings.EqualFold(m.volcano, strings.TrimSpace(v)) {
			return m.mode, nil
		}
		names[i] = m.volcano
	}
	return "", fieldErr(key, "", "one of "+strings.Join(names, ", ")+" (hami-core = time-sliced sharing), or no annotation for any mode", fmt.Sprintf("%q", v))
}

// parseVolcanoUUIDs reads deviceshare's UUID lists the way it does (items
// trimmed, empty ones skipped), but refuses a list that names no GPU, which
// deviceshare would read as no filter at all.
func parseVolcanoUUIDs(key, v string) ([]string, error) {
	var out []string
	for i, item := range strings.Split(v, ",") {
		item = strings.TrimSpace(item)
		switch {
		case item == "":
			continue
		case !validUUID(item):
			return nil, fieldErr(key, fmt.Sprintf("item %d", i), "a GPU UUID", fmt.Sprintf("%q", item))
		}
		out = append(out, item)
	}
	if len(out) == 0 {
		return nil, fieldErr(key, "", "a comma-separated list of GPU UUIDs (remove the annotation to allow any GPU)", fmt.Sprintf("%q", v))
	}
	return out, nil
}

// parsePodGroupPolicy reads VolcanoPodGroupPolicyKey: "spread" or nothing.
func parsePodGroupPolicy(key, v string) (bool, error) {
	if strings.EqualFold(strings.TrimSpace(v), VolcanoPodGroupSpread) {
		return true, nil
	}
	return false, fieldErr(key, "", VolcanoPodGroupSpread+" (no two pods of one PodGroup on one GPU), the only value Volcano defines", fmt.Sprintf("%q", v))
}

// volcanoKeys are the deviceshare keys a user sets that this scheduler reads.
func volcanoKeys() []string {
	return []string{VolcanoModeKey, VolcanoUUIDIncludeKey, VolcanoUUIDExcludeKey, VolcanoPodGroupPolicyKey,
		DeviceShareTypeIncludeKey, DeviceShareTypeExcludeKey}
}
