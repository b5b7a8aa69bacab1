package vgpu

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/volcano-vgpu/volcano-vgpu/api"
	"github.com/volcano-vgpu/volcano-vgpu/plugins/placement"
)

// Argument keys, as written under the plugin's `arguments:` in the
// scheduler configuration.
const (
	argDevicePolicy     = "vgpu.devicePolicy"    // binpack|spread: which GPU of a node
	argNodePolicy       = "vgpu.nodePolicy"      // binpack|spread: which node
	argTopology         = "vgpu.topology"        // prefer|required|none for multi-GPU containers
	argDefaultCores     = "vgpu.defaultCores"    // cores for a container that asks neither cores nor memory
	argWeight           = "vgpu.weight"          // node score weight
	argStaleAfter       = "vgpu.staleAfter"      // inventory heartbeat age after which a node gets nothing
	argResourceNumber   = "vgpu.resource.number" // resource names (defaults: Volcano's)
	argResourceMemory   = "vgpu.resource.memory" //
	argResourceMemPct   = "vgpu.resource.memoryPercentage"
	argResourceCores    = "vgpu.resource.cores"
	deviceshareVGPUFlag = "deviceshare.VGPUEnable" // the rival's switch; see warnings
)

// Args are the plugin's typed arguments.
type Args struct {
	DevicePolicy placement.Policy
	NodePolicy   placement.Policy
	Topology     placement.TopologyMode
	DefaultCores int
	Weight       float64
	StaleAfter   time.Duration
	Resources    api.ResourceNames
}

// DefaultArgs are the arguments when none are given.
func DefaultArgs() Args {
	return Args{
		DevicePolicy: placement.Binpack,
		NodePolicy:   placement.Binpack,
		Topology:     placement.TopologyPrefer,
		DefaultCores: 0,
		Weight:       10,
		StaleAfter:   3 * time.Minute,
		Resources:    api.DefaultResourceNames(),
	}
}

// ErrArgs is wrapped by every argument error.
var ErrArgs = errors.New("invalid vgpu plugin arguments")

// ParseArgs decodes, defaults and validates the plugin's arguments. Every
// problem is reported at once; unknown keys are errors.
func ParseArgs(raw map[string]any) (Args, error) {
	a := DefaultArgs()
	var errs []string
	bad := func(key string, v any, expected string) {
		errs = append(errs, fmt.Sprintf("%s: expected %s, got %v", key, expected, v))
	}
	keys := make([]string, 0, len(raw))
	for k := range raw {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		v := raw[k]
		switch k {
		case argDevicePolicy, argNodePolicy:
			p, err := placement.ParsePolicy(fmt.Sprint(v))
			if err != nil {
				bad(k, v, "one of "+strings.Join(placement.Policies(), ", "))
				continue
			}
			if k == argDevicePolicy {
				a.DevicePolicy = p
			} else {
				a.NodePolicy = p
			}
		case argTopology:
			t, err := placement.ParseTopology(fmt.Sprint(v))
			if err != nil {
				bad(k, v, "prefer, required or none")
				continue
			}
			a.Topology = t
		case argDefaultCores:
			n, ok := asInt(v)
			if !ok || n < 0 || n > 100 {
				bad(k, v, "an integer percentage from 0 to 100")
				continue
			}
			a.DefaultCores = n
		case argWeight:
			f, ok := asFloat(v)
			if !ok || f < 0 || f > 1000 {
				bad(k, v, "a number from 0 to 1000")
				continue
			}
			a.Weight = f
		case argStaleAfter:
			d, err := time.ParseDuration(fmt.Sprint(v))
			if err != nil || d < 10*time.Second {
				bad(k, v, "a duration of at least 10s, such as 3m")
				continue
			}
			a.StaleAfter = d
		case argResourceNumber:
			a.Resources.Number = fmt.Sprint(v)
		case argResourceMemory:
			a.Resources.Memory = fmt.Sprint(v)
		case argResourceMemPct:
			a.Resources.MemoryPercentage = fmt.Sprint(v)
		case argResourceCores:
			a.Resources.Cores = fmt.Sprint(v)
		default:
			errs = append(errs, fmt.Sprintf("%s: unknown argument; known: %s", k, strings.Join(knownArgs(), ", ")))
		}
	}
	if err := a.Resources.Validate(); err != nil {
		errs = append(errs, err.Error())
	}
	if len(errs) > 0 {
		return Args{}, fmt.Errorf("%w: %s", ErrArgs, strings.Join(errs, "; "))
	}
	return a, nil
}

func knownArgs() []string {
	return []string{argDevicePolicy, argNodePolicy, argTopology, argDefaultCores, argWeight, argStaleAfter,
		argResourceNumber, argResourceMemory, argResourceMemPct, argResourceCores}
}

// Warnings are configuration choices that work but are probably mistakes.
// otherPlugins maps each other enabled plugin of the configuration to its
// arguments.
func Warnings(a Args, otherPlugins map[string]map[string]any) []string {
	var out []string
	if ds, ok := otherPlugins["deviceshare"]; ok {
		if on, _ := asBool(ds[deviceshareVGPUFlag]); on {
			out = append(out, fmt.Sprintf("deviceshare has %s=true in the same configuration: both plugins would place %s "+
				"and book the same GPUs twice; disable one of them", deviceshareVGPUFlag, a.Resources.Number))
		}
	}
	return out
}

func asInt(v any) (int, bool) {
	f, ok := asFloat(v)
	if !ok || f != math.Trunc(f) {
		return 0, false
	}
	return int(f), true
}

func asFloat(v any) (float64, bool) {
	switch x := v.(type) {
	case int:
		return float64(x), true
	case int64:
		return float64(x), true
	case float64:
		return x, true
	case string:
		f, err := strconv.ParseFloat(strings.TrimSpace(x), 64)
		return f, err == nil
	}
	return 0, false
}

func asBool(v any) (bool, bool) {
	switch x := v.(type) {
	case bool:
		return x, true
	case string:
		b, err := strconv.ParseBool(strings.TrimSpace(x))
		return b, err == nil
	}
	return false, false
}
