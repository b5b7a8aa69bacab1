package memguard

import (
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// Source lists the processes holding memory on a GPU.
type Source interface {
	Running(uuid string) ([]Process, error)
}

// NVMLSource reads nvmlDeviceGetComputeRunningProcesses (v3, v2 or v1, as
// the driver offers), whose pids are the host's.
type NVMLSource struct {
	Lib     nvml.Interface // initialized
	handles map[string]nvml.Device
}

var _ Source = (*NVMLSource)(nil)

// notAvailable is NVML_VALUE_NOT_AVAILABLE: the driver cannot say (e.g.
// seen from a container without the host's pid namespace).
const notAvailable = ^uint64(0)

// Running lists the GPU's compute processes with the memory they hold.
func (s *NVMLSource) Running(uuid string) ([]Process, error) {
	if s.handles == nil {
		s.handles = map[string]nvml.Device{}
	}
	h, ok := s.handles[uuid]
	if !ok {
		d, ret := s.Lib.DeviceGetHandleByUUID(uuid)
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("GPU %s: handle: %v", uuid, ret)
		}
		h, s.handles[uuid] = d, d
	}
	infos, ret := h.GetComputeRunningProcesses()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("GPU %s: running processes: %v", uuid, ret)
	}
	out := make([]Process, 0, len(infos))
	for _, in := range infos {
		if in.UsedGpuMemory == notAvailable {
			return nil, fmt.Errorf("GPU %s: the driver does not say what process %d holds (run the device plugin with hostPID: true)", uuid, in.Pid)
		}
		out = append(out, Process{PID: in.Pid, UsedBytes: in.UsedGpuMemory})
	}
	return out, nil
}
