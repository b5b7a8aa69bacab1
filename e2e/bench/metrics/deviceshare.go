package metrics

import (
	"fmt"
	"strconv"
	"strings"
)

// DeviceshareIDsKey is the pod annotation where Volcano v1.14.1's
// deviceshare (VGPUEnable) records its placement while allocating
// (pkg/scheduler/api/devices/nvidia/vgpu: AssignedIDsAnnotations).
const DeviceshareIDsKey = "volcano.sh/vgpu-ids-new"

// ParseDeviceshare reads DeviceshareIDsKey: one entry per GPU-asking
// container, separated by ';', each a list of "<uuid>,<type>,<MiB>,<cores>:".
// It is the rival's format, read only by the benchmark.
func ParseDeviceshare(v string) ([][]Share, error) {
	if v == "" {
		return nil, fmt.Errorf("%s: empty", DeviceshareIDsKey)
	}
	var out [][]Share
	for ci, ctr := range strings.Split(v, ";") {
		var shares []Share
		for _, dev := range strings.Split(ctr, ":") {
			if dev == "" {
				continue
			}
			f := strings.Split(dev, ",")
			if len(f) != 4 || f[0] == "" {
				return nil, fmt.Errorf("%s: container %d: %q: expected <uuid>,<type>,<MiB>,<cores>", DeviceshareIDsKey, ci, dev)
			}
			mem, err1 := strconv.ParseInt(f[2], 10, 64)
			cores, err2 := strconv.Atoi(f[3])
			if err1 != nil || err2 != nil || mem < 0 || cores < 0 {
				return nil, fmt.Errorf("%s: container %d: %q: expected whole non-negative MiB and cores", DeviceshareIDsKey, ci, dev)
			}
			shares = append(shares, Share{UUID: f[0], MemoryMiB: mem, Cores: cores})
		}
		out = append(out, shares)
	}
	return out, nil
}
