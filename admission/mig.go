package admission

import (
	"fmt"
	"regexp"
	"strconv"

	"github.com/volcano-vgpu/volcano-vgpu/api"
	"github.com/volcano-vgpu/volcano-vgpu/podrequest"
)

// profileName is an NVIDIA MIG profile name: <compute slices>g.<memory>gb,
// optionally with a media-engine suffix (1g.10gb+me, 1g.10gb-me).
var profileName = regexp.MustCompile(`^[0-9]+g\.([0-9]+)gb(?:[+-][a-z0-9+-]*)?$`)

// nominalMiB is the memory the name of a MIG profile gives, in MiB: every
// NVIDIA MIG profile's memory rounded up to whole GiB (1g.10gb: 9856 MiB on
// an A100-40GB, 9728 on an A100-80GB; 10240 MiB named). The real memory
// per model comes from the inventory; what the name gives is an upper
// bound. ok is false for a name that does not carry it.
func nominalMiB(profile string) (mib int64, ok bool) {
	m := profileName.FindStringSubmatch(profile)
	if m == nil {
		return 0, false
	}
	gb, err := strconv.ParseInt(m[1], 10, 32)
	if err != nil {
		return 0, false
	}
	return gb * 1024, true
}

// migProfileTooSmall refuses a container that asks more memory (MiB) per
// GPU than the MIG profile the pod names can have on any GPU: more than
// the name's memory. Only what is certain: an ask between the model's real
// memory and the name's is left to the scheduler, which knows the real
// memory from the inventory and refuses it there; a percentage depends on
// the GPU and is left to it too.
func migProfileTooSmall(profile string, asks []podrequest.Ask) string {
	limit, ok := nominalMiB(profile)
	if !ok {
		return ""
	}
	for _, r := range asks {
		if r.MemoryPercent == 0 && r.MemoryMiB > limit {
			return fmt.Sprintf("container %q asks %d MiB of GPU memory, more than the %s MIG profile (%s) has on any GPU (at most %d MiB): name a larger profile or ask less memory; a MIG instance is never capped below the ask",
				r.Name, r.MemoryMiB, profile, api.MIGProfileKey, limit)
		}
	}
	return ""
}
