package vgpu

import (
	"errors"
	"fmt"
	"math"
	"reflect"
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

// The keys above are the rawArgs fields' arg tags (TestArgKeys).

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
	var r rawArgs
	r.setDefaults()
	_ = r.validate() // the defaults are valid (TestParseArgs "defaults")
	return r.args()
}

// ErrArgs is wrapped by every argument error.
var ErrArgs = errors.New("invalid vgpu plugin arguments")

// rawArgs are the arguments as written, the way kube-scheduler's plugins take
// theirs: decoded strictly by key into typed fields (nil = not given), then
// defaulted, then validated, each a step of its own.
type rawArgs struct {
	DevicePolicy   *string  `arg:"vgpu.devicePolicy"`
	NodePolicy     *string  `arg:"vgpu.nodePolicy"`
	Topology       *string  `arg:"vgpu.topology"`
	DefaultCores   *float64 `arg:"vgpu.defaultCores"`
	Weight         *float64 `arg:"vgpu.weight"`
	StaleAfter     *string  `arg:"vgpu.staleAfter"`
	ResourceNumber *string  `arg:"vgpu.resource.number"`
	ResourceMemory *string  `arg:"vgpu.resource.memory"`
	ResourceMemPct *string  `arg:"vgpu.resource.memoryPercentage"`
	ResourceCores  *string  `arg:"vgpu.resource.cores"`

	// filled by validate
	devicePolicy, nodePolicy placement.Policy
	topology                 placement.TopologyMode
	staleAfter               time.Duration
}

// ParseArgs decodes, defaults and validates the plugin's arguments. Every
// problem is reported at once; unknown keys are errors.
func ParseArgs(raw map[string]any) (Args, error) {
	r, errs := decodeArgs(raw)
	r.setDefaults()
	errs = append(errs, r.validate()...)
	if len(errs) > 0 {
		return Args{}, fmt.Errorf("%w: %s", ErrArgs, strings.Join(errs, "; "))
	}
	return r.args(), nil
}

// decodeArgs sets the field of each key given, reporting unknown keys and
// values of the wrong type. YAML numbers may arrive as int, float or a string.
func decodeArgs(raw map[string]any) (rawArgs, []string) {
	var r rawArgs
	var errs []string
	fields := argFields(&r)
	keys := make([]string, 0, len(raw))
	for k := range raw {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		v := raw[k]
		f, ok := fields[k]
		if !ok {
			errs = append(errs, fmt.Sprintf("%s: unknown argument; known: %s", k, strings.Join(knownArgs(), ", ")))
			continue
		}
		switch dst := f.(type) {
		case **string:
			s := fmt.Sprint(v)
			*dst = &s
		case **float64:
			n, ok := asFloat(v)
			if !ok {
				errs = append(errs, fmt.Sprintf("%s: expected a number, got %v", k, v))
				continue
			}
			*dst = &n
		}
	}
	return r, errs
}

// argFields maps each argument key to the address of its field in r.
func argFields(r *rawArgs) map[string]any {
	v := reflect.ValueOf(r).Elem()
	out := map[string]any{}
	for i := 0; i < v.NumField(); i++ {
		if key := v.Type().Field(i).Tag.Get("arg"); key != "" {
			out[key] = v.Field(i).Addr().Interface()
		}
	}
	return out
}

func knownArgs() []string {
	t := reflect.TypeOf(rawArgs{})
	var out []string
	for i := 0; i < t.NumField(); i++ {
		if key := t.Field(i).Tag.Get("arg"); key != "" {
			out = append(out, key)
		}
	}
	return out
}

// setDefaults fills what the configuration left out.
func (r *rawArgs) setDefaults() {
	str := func(p **string, v string) {
		if *p == nil {
			*p = &v
		}
	}
	num := func(p **float64, v float64) {
		if *p == nil {
			*p = &v
		}
	}
	names := api.DefaultResourceNames()
	str(&r.DevicePolicy, string(placement.Binpack))
	str(&r.NodePolicy, string(placement.Binpack))
	str(&r.Topology, string(placement.TopologyPrefer))
	num(&r.DefaultCores, 0)
	num(&r.Weight, 10)
	str(&r.StaleAfter, "3m")
	str(&r.ResourceNumber, names.Number)
	str(&r.ResourceMemory, names.Memory)
	str(&r.ResourceMemPct, names.MemoryPercentage)
	str(&r.ResourceCores, names.Cores)
}

// validate checks the defaulted arguments and returns every problem.
func (r *rawArgs) validate() []string {
	var errs []string
	bad := func(key string, v any, expected string) {
		errs = append(errs, fmt.Sprintf("%s: expected %s, got %v", key, expected, v))
	}
	var err error
	if r.devicePolicy, err = api.ParsePolicy(argDevicePolicy, *r.DevicePolicy); err != nil {
		errs = append(errs, err.Error())
	}
	if r.nodePolicy, err = api.ParsePolicy(argNodePolicy, *r.NodePolicy); err != nil {
		errs = append(errs, err.Error())
	}
	if r.topology, err = api.ParseTopology(argTopology, *r.Topology); err != nil {
		errs = append(errs, err.Error())
	}
	if c := *r.DefaultCores; c < 0 || c > 100 || c != math.Trunc(c) {
		bad(argDefaultCores, c, "an integer percentage from 0 to 100")
	}
	if w := *r.Weight; w < 0 || w > 1000 {
		bad(argWeight, w, "a number from 0 to 1000")
	}
	if d, err := time.ParseDuration(*r.StaleAfter); err != nil || d < 10*time.Second {
		bad(argStaleAfter, *r.StaleAfter, "a duration of at least 10s, such as 3m")
	} else {
		r.staleAfter = d
	}
	if err := r.resources().Validate(); err != nil {
		errs = append(errs, err.Error())
	}
	return errs
}

func (r *rawArgs) resources() api.ResourceNames {
	return api.ResourceNames{Number: *r.ResourceNumber, Memory: *r.ResourceMemory, MemoryPercentage: *r.ResourceMemPct, Cores: *r.ResourceCores}
}

// args is the validated arguments (after validate).
func (r *rawArgs) args() Args {
	return Args{DevicePolicy: r.devicePolicy, NodePolicy: r.nodePolicy, Topology: r.topology, DefaultCores: int(*r.DefaultCores),
		Weight: *r.Weight, StaleAfter: r.staleAfter, Resources: r.resources()}
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
