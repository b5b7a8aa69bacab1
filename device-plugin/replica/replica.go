// Package replica names the vgpu-number devices the plugin advertises to
// kubelet: MaxShares replicas per GPU, "<GPU UUID>::<k>". A replica carries
// no limits of its own; it only tells kubelet how many containers a GPU may
// serve and lets Allocate map the IDs kubelet picked back to physical GPUs.
package replica

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/volcano-vgpu/volcano-vgpu/api"
)

const sep = "::"

// ErrBadID is wrapped by Parse errors.
var ErrBadID = errors.New("not a vgpu-number device ID")

// ID returns the ID of replica k of the GPU.
func ID(uuid string, k int) string { return uuid + sep + strconv.Itoa(k) }

// Parse splits an ID into the GPU UUID and the replica number.
func Parse(id string) (uuid string, k int, err error) {
	i := strings.LastIndex(id, sep)
	if i <= 0 {
		return "", 0, fmt.Errorf("%w: %q (expected <GPU UUID>%s<replica>)", ErrBadID, id, sep)
	}
	k, err = strconv.Atoi(id[i+len(sep):])
	if err != nil || k < 0 || k >= api.MaxShares {
		return "", 0, fmt.Errorf("%w: %q (replica must be 0 to %d)", ErrBadID, id, api.MaxShares-1)
	}
	return id[:i], k, nil
}

// UUID returns the GPU of an ID, or "" if the ID is malformed.
func UUID(id string) string {
	u, _, err := Parse(id)
	if err != nil {
		return ""
	}
	return u
}

// Devices lists the replicas of every GPU: healthy GPUs' replicas as
// Healthy, unhealthy GPUs' as Unhealthy (kubelet then stops counting them
// as allocatable but keeps the containers that already use them).
//
// Replicas carry no NUMA topology on purpose: the scheduler already chose
// the GPUs (NUMA included), and with a topology manager policy other than
// none kubelet would otherwise offer GetPreferredAllocation only the
// replicas of the NUMA node it prefers, which need not hold the assigned GPU.
func Devices(gpus []api.GPU) []*pluginapi.Device {
	n := 0
	for _, g := range gpus {
		n += g.MaxShares
	}
	out := make([]*pluginapi.Device, 0, n)
	for _, g := range gpus {
		health := pluginapi.Healthy
		if !g.Healthy {
			health = pluginapi.Unhealthy
		}
		for k := 0; k < g.MaxShares; k++ {
			out = append(out, &pluginapi.Device{ID: ID(g.UUID, k), Health: health})
		}
	}
	return out
}
