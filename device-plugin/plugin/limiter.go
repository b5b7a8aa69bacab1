package plugin

import (
	"fmt"

	"github.com/volcano-vgpu/volcano-vgpu/api"
)

// LimiterInput is what one container's limiter config says.
type LimiterInput struct {
	PodUID, Namespace, Name, Container string
	Policy                             api.ComputePolicy
	SharedDir                          string // inside the container
	Devices                            []api.DeviceShare
	// ContextMiB is what one CUDA context takes on each GPU, by UUID
	// (limiter.contextMiB for its model); absent: not counted.
	ContextMiB map[string]uint32
	// MPSThreadPercent: 0 on time-sliced GPUs; on an MPS GPU the
	// container's active-thread percentage (its cores).
	MPSThreadPercent uint32
}

// LimiterEncoder renders the limiter config file (tests plug in a
// readable one; production uses EncodeLimiter).
type LimiterEncoder func(LimiterInput) ([]byte, error)

// EncodeLimiter renders the binary config through api.LimiterConfig. A
// share of 0 cores means the container asked for no compute share: the
// limiter gets 100% (no compute limit) on that GPU. On an MPS GPU the SM
// partition bounds compute: libvcuda gets no launch throttle (policy none,
// 100%) and the MPS percentage instead; it still caps memory.
func EncodeLimiter(in LimiterInput) ([]byte, error) {
	c := api.LimiterConfig{
		Policy: in.Policy, PodUID: in.PodUID, PodNamespace: in.Namespace, PodName: in.Name,
		ContainerName: in.Container, SharedDir: in.SharedDir, MPSThreadPercent: in.MPSThreadPercent,
	}
	if in.MPSThreadPercent > 0 {
		c.Policy = api.ComputeNone
	}
	for _, d := range in.Devices {
		cores := uint32(d.Cores)
		if cores == 0 || in.MPSThreadPercent > 0 {
			cores = 100
		}
		ctx := in.ContextMiB[d.UUID]
		if int64(ctx) >= d.MemoryMiB {
			return nil, fmt.Errorf("%s: a CUDA context takes %d MiB on this GPU model (limiter.contextMiB) and the container asks %d MiB of it: ask for more GPU memory per GPU, or lower limiter.contextMiB for this model", d.UUID, ctx, d.MemoryMiB)
		}
		c.Devices = append(c.Devices, api.LimiterDevice{UUID: d.UUID, MemoryLimitBytes: uint64(d.MemoryMiB) << 20, CorePercent: cores, ContextMiB: ctx})
	}
	return c.Encode()
}
