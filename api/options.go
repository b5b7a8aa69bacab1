package api

import (
	"fmt"
	"slices"
	"sort"
	"strings"
)

// Topology says how much a multi-GPU container cares about GPU links.
type Topology string

const (
	TopologyPrefer   Topology = "prefer"   // best-connected set, else any (default)
	TopologyRequired Topology = "required" // best-connected set or not at all
	TopologyNone     Topology = "none"     // ignore links
)

// Policy places work: binpack fills the fullest place first, spread the emptiest.
type Policy string

const (
	PolicyBinpack Policy = "binpack"
	PolicySpread  Policy = "spread"
)

// ComputePolicy is how libvcuda enforces the cores share.
type ComputePolicy string

const (
	ComputeFixed   ComputePolicy = "fixed"   // hard cap at the share
	ComputeBalance ComputePolicy = "balance" // share guaranteed, may burst when idle
	ComputeNone    ComputePolicy = "none"    // no throttling
)

// PodOptions are the per-pod choices made through annotations: ours and
// Volcano deviceshare's.
type PodOptions struct {
	TypeInclude, TypeExclude []string
	UUIDInclude, UUIDExclude []string
	Topology                 Topology      // "" = scheduler default
	DevicePolicy, NodePolicy Policy        // "" = scheduler default
	ComputePolicy            ComputePolicy // "" = node or plugin default
	// Mode: the sharing mode every GPU of the pod must be in
	// (VolcanoModeKey); "" = any.
	Mode GPUMode
	// SpreadGroup: no GPU already holding a pod of the same PodGroup
	// (VolcanoPodGroupPolicyKey: spread).
	SpreadGroup bool
	// MIGProfile: the MIG profile of every GPU container (MIGProfileKey);
	// set, Mode is mig.
	MIGProfile string
}

// ParsePodOptions reads the pod annotations this project owns and those of
// Volcano deviceshare it honours. Unknown annotations under Prefix or
// VolcanoVGPUPrefix are errors, so a typo does not silently do nothing; the
// annotations deviceshare writes on the pods it places are ignored.
func ParsePodOptions(annotations map[string]string) (PodOptions, error) {
	var o PodOptions
	var err error
	keys := make([]string, 0, len(annotations))
	for k := range annotations {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		v := annotations[k]
		switch {
		case strings.HasPrefix(k, Prefix):
			err = o.own(k, v)
		case strings.HasPrefix(k, VolcanoVGPUPrefix):
			err = o.volcano(k, v)
		}
		if err != nil {
			return PodOptions{}, err
		}
	}
	if err := o.deviceShareFilters(annotations); err != nil {
		return PodOptions{}, err
	}
	if o.MIGProfile != "" {
		if o.Mode != "" && o.Mode != ModeMIG {
			return PodOptions{}, fieldErr(MIGProfileKey, "", fmt.Sprintf("a pod in MIG mode (%s: %s, or no %s)", VolcanoModeKey, ModeMIG.Volcano(), VolcanoModeKey),
				fmt.Sprintf("%s: %s", VolcanoModeKey, o.Mode.Volcano()))
		}
		o.Mode = ModeMIG
	}
	return o, nil
}

// own reads one of this project's annotations.
func (o *PodOptions) own(k, v string) error {
	var err error
	switch k {
	case AssignmentKey, RequestsKey:
	case GPUTypeIncludeKey:
		o.TypeInclude, err = parseList(k, v, false)
	case GPUTypeExcludeKey:
		o.TypeExclude, err = parseList(k, v, false)
	case GPUUUIDIncludeKey:
		o.UUIDInclude, err = parseList(k, v, true)
	case GPUUUIDExcludeKey:
		o.UUIDExclude, err = parseList(k, v, true)
	case TopologyKey:
		o.Topology, err = ParseTopology(k, v)
	case DevicePolicyKey:
		o.DevicePolicy, err = ParsePolicy(k, v)
	case NodePolicyKey:
		o.NodePolicy, err = ParsePolicy(k, v)
	case ComputePolicyKey:
		o.ComputePolicy, err = ParseComputePolicy(k, v)
	case MIGProfileKey:
		o.MIGProfile = strings.TrimSpace(v)
		_, err = ParseMIGProfileName(k, o.MIGProfile)
	default:
		return fieldErr(k, "", "one of the known annotations "+strings.Join(podKeys(), ", "), "an unknown key")
	}
	return err
}

// volcano reads one of deviceshare's volcano.sh/vgpu-* annotations; the
// UUID lists are merged with ours in deviceShareFilters.
func (o *PodOptions) volcano(k, v string) error {
	var err error
	switch {
	case k == VolcanoModeKey:
		o.Mode, err = ParseVolcanoMode(k, v)
	case k == VolcanoPodGroupPolicyKey:
		o.SpreadGroup, err = parsePodGroupPolicy(k, v)
	case k == VolcanoUUIDIncludeKey, k == VolcanoUUIDExcludeKey, deviceShareOutput(k):
	case k == DefaultResourceNumber, k == DefaultResourceMemory, k == DefaultResourceMemoryPercentage, k == DefaultResourceCores:
		return fieldErr(k, "", "no annotation of that name: it is a resource, asked under the container's resources.limits", "an annotation")
	default:
		return fieldErr(k, "", "one of the Volcano vGPU annotations this scheduler honours, "+strings.Join(volcanoKeys(), ", ")+
			" (remove it: an unknown key would do nothing)", "an unknown key")
	}
	return err
}

// deviceShareFilters applies deviceshare's model and UUID filters. Each
// stands for ours when ours is not set; with both set they must say the
// same, else the pod is refused with both keys named (which one was meant
// cannot be guessed).
func (o *PodOptions) deviceShareFilters(annotations map[string]string) error {
	typeIn, hasTypeIn := annotations[DeviceShareTypeIncludeKey]
	typeEx, hasTypeEx := annotations[DeviceShareTypeExcludeKey]
	if hasTypeIn {
		hasTypeEx = false // deviceshare reads nouse-gputype only without use-gputype
	}
	uuidIn, hasUUIDIn := annotations[VolcanoUUIDIncludeKey]
	uuidEx, hasUUIDEx := annotations[VolcanoUUIDExcludeKey]
	for _, f := range []struct {
		theirs, ours string
		set          bool
		value        string
		dst          *[]string
		what         string
		parse        func(key, v string) ([]string, error)
	}{
		{DeviceShareTypeIncludeKey, GPUTypeIncludeKey, hasTypeIn, typeIn, &o.TypeInclude, "models", parseModels},
		{DeviceShareTypeExcludeKey, GPUTypeExcludeKey, hasTypeEx, typeEx, &o.TypeExclude, "models", parseModels},
		{VolcanoUUIDIncludeKey, GPUUUIDIncludeKey, hasUUIDIn, uuidIn, &o.UUIDInclude, "GPUs", parseVolcanoUUIDs},
		{VolcanoUUIDExcludeKey, GPUUUIDExcludeKey, hasUUIDEx, uuidEx, &o.UUIDExclude, "GPUs", parseVolcanoUUIDs},
	} {
		if !f.set {
			continue
		}
		list, err := f.parse(f.theirs, f.value)
		if err != nil {
			return err
		}
		if *f.dst != nil && !slices.Equal(*f.dst, list) {
			return fieldErr(f.theirs, "", fmt.Sprintf("the same %s as %s (%q), or only one of the two annotations",
				f.what, f.ours, strings.Join(*f.dst, ",")), fmt.Sprintf("%q", f.value))
		}
		*f.dst = list
	}
	return nil
}

func parseModels(key, v string) ([]string, error) { return parseList(key, v, false) }

// ParsePolicy reads a binpack/spread policy value found under key.
func ParsePolicy(key, v string) (Policy, error) {
	return parseEnum(key, v, PolicyBinpack, PolicySpread)
}

// ParseTopology reads a topology mode value found under key.
func ParseTopology(key, v string) (Topology, error) {
	return parseEnum(key, v, TopologyPrefer, TopologyRequired, TopologyNone)
}

// ParseComputePolicy reads a compute policy value found under key.
func ParseComputePolicy(key, v string) (ComputePolicy, error) {
	return parseEnum(key, v, ComputeFixed, ComputeBalance, ComputeNone)
}

func podKeys() []string {
	return []string{AssignmentKey, RequestsKey, GPUTypeIncludeKey, GPUTypeExcludeKey, GPUUUIDIncludeKey, GPUUUIDExcludeKey,
		TopologyKey, DevicePolicyKey, NodePolicyKey, ComputePolicyKey, MIGProfileKey}
}

// parseEnum matches v against allowed, ignoring case and surrounding space.
func parseEnum[T ~string](key, v string, allowed ...T) (T, error) {
	for _, a := range allowed {
		if strings.EqualFold(string(a), strings.TrimSpace(v)) {
			return a, nil
		}
	}
	names := make([]string, len(allowed))
	for i, a := range allowed {
		names[i] = string(a)
	}
	return "", fieldErr(key, "", "one of "+strings.Join(names, ", "), fmt.Sprintf("%q", v))
}

func parseList(key, v string, uuids bool) ([]string, error) {
	var out []string
	for i, item := range strings.Split(v, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			return nil, fieldErr(key, fmt.Sprintf("item %d", i), "a comma-separated list with no empty items", fmt.Sprintf("%q", v))
		}
		if uuids && !validUUID(item) {
			return nil, fieldErr(key, fmt.Sprintf("item %d", i), "a GPU UUID", fmt.Sprintf("%q", item))
		}
		out = append(out, item)
	}
	return out, nil
}
