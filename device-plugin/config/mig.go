package config

import (
	"cmp"
	"fmt"
	"sort"
	"strings"

	"github.com/volcano-vgpu/volcano-vgpu/api"
)

// MIG configures the GPUs sharing gives mode mig. A GPU a geometry rule
// names has a fixed geometry: the GPU instances it must hold, which the
// scheduler hands out whole; any other MIG GPU is on-demand: the scheduler
// picks each pod's profile and placement. The most specific rule wins, a
// GPU's UUID over its model (the longest matching substring), as in sharing.
type MIG struct {
	// Models: a substring of the GPU model name → geometry.
	Models map[string]Geometry `json:"models,omitempty"`
	// GPUs: GPU UUID → geometry.
	GPUs map[string]Geometry `json:"gpus,omitempty"`
}

// Geometry lists the profiles of a GPU's instances, e.g. [3g.20gb, 2g.10gb,
// 1g.5gb, 1g.5gb]; a profile listed twice is two instances.
type Geometry []string

// GeometryFor is the fixed geometry of the GPU uuid (model); nil for an
// on-demand GPU.
func (m MIG) GeometryFor(model, uuid string) Geometry {
	if g, ok := m.GPUs[uuid]; ok {
		return g
	}
	keys := make([]string, 0, len(m.Models))
	for k := range m.Models {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	best, geo := -1, Geometry(nil)
	for _, k := range keys {
		if strings.Contains(model, k) && len(k) > best {
			best, geo = len(k), m.Models[k]
		}
	}
	return geo
}

func (m MIG) validate(sharing Sharing) error {
	if (len(m.Models) > 0 || len(m.GPUs) > 0) && !sharing.Uses(api.ModeMIG) {
		return fmt.Errorf("mig: expected a geometry only where sharing gives a GPU mode mig, got geometries and no GPU in mode mig (set sharing.gpus[<uuid>]: mig, or remove mig)")
	}
	check := func(path string, g Geometry) error { return g.validate(path) }
	return cmp.Or(
		checkKeyed("mig.models", m.Models, modelKey, "a non-empty substring of a GPU model name, such as A100", check),
		checkKeyed("mig.gpus", m.GPUs, api.ValidUUID, "a GPU UUID such as GPU-5a7c…", check))
}

// validate checks the names and that the instances can share one GPU:
// at most 7 compute slices (A100 and H100 have 7).
func (g Geometry) validate(key string) error {
	const maxSlices = 7
	if len(g) == 0 {
		return fmt.Errorf("%s: expected a list of MIG profiles such as [3g.20gb, 2g.10gb, 1g.5gb, 1g.5gb] (remove the rule for on-demand instances), got none", key)
	}
	total := 0
	for i, name := range g {
		slices, err := api.ParseMIGProfileName(fmt.Sprintf("%s[%d]", key, i), name)
		if err != nil {
			return err
		}
		total += slices
	}
	if total > maxSlices {
		return fmt.Errorf("%s: expected instances of at most %d compute slices together, got %d (%s)", key, maxSlices, total, strings.Join(g, ", "))
	}
	return nil
}
