package vgpu

import (
	"fmt"

	"volcano.sh/volcano/pkg/scheduler/conf"
)

// CheckTiers validates the vgpu arguments of a scheduler configuration's
// tiers, so the scheduler can refuse to start on a bad configuration (the
// plugin builder itself cannot return an error). It returns the warnings
// about choices that work but are probably mistakes.
func CheckTiers(tiers []conf.Tier) (warnings []string, err error) {
	var found *conf.PluginOption
	others := map[string]map[string]any{}
	for ti := range tiers {
		for pi := range tiers[ti].Plugins {
			opt := &tiers[ti].Plugins[pi]
			if opt.Name == PluginName {
				if found != nil {
					return nil, fmt.Errorf("%w: plugin %q is listed twice; list it once", ErrArgs, PluginName)
				}
				found = opt
				continue
			}
			others[opt.Name] = opt.Arguments
		}
	}
	if found == nil {
		return []string{fmt.Sprintf("plugin %q is not enabled in the scheduler configuration: vGPU pods will not be placed", PluginName)}, nil
	}
	args, err := ParseArgs(found.Arguments)
	if err != nil {
		return nil, err
	}
	return Warnings(args, others), nil
}
