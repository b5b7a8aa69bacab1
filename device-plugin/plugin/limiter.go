package plugin

import (
	"github.com/volcano-vgpu/volcano-vgpu/api"
)

// LimiterInput is what one container's limiter config says.
type LimiterInput struct {
	PodUID, Namespace, Name, Container string
	Policy                             api.ComputePolicy
	SharedDir                          string // inside the container
	Devices                            []api.DeviceShare
}

// LimiterEncoder renders the limiter config file (tests plug in a
// readable one; production uses EncodeLimiter).
type LimiterEncoder func(LimiterInput) ([]byte, error)

// EncodeLimiter renders the binary config through api.LimiterConfig. A
// share of 0 cores means the container asked for no compute share: the
// limiter gets 100% (no compute limit) on that GPU.
func EncodeLimiter(in LimiterInput) ([]byte, error) {
	c := api.LimiterConfig{
		Policy: in.Policy, PodUID: in.PodUID, PodNamespace: in.Namespace, PodName: in.Name,
		ContainerName: in.Container, SharedDir: in.SharedDir,
	}
	for _, d := range in.Devices {
		cores := uint32(d.Cores)
		if cores == 0 {
			cores = 100
		}
		c.Devices = append(c.Devices, api.LimiterDevice{UUID: d.UUID, MemoryLimitBytes: uint64(d.MemoryMiB) << 20, CorePercent: cores})
	}
	return c.Encode()
}
