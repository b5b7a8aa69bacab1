package compute

import (
	"encoding/binary"
	"fmt"
	"math"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// NVMLSource reads GPU-wide utilization samples (nvmlDeviceGetSamples,
// about ten a second on an H100). Per-process samples are never used.
type NVMLSource struct {
	Lib     nvml.Interface // initialized
	handles map[string]nvml.Device
	last    map[string]uint64 // newest sample timestamp seen, µs
}

var _ Source = (*NVMLSource)(nil)

// Busy sums the busy time of the samples newer than the last call's. NVML
// stamps samples with the wall clock (µs); the window is returned on
// CLOCK_MONOTONIC (mono is now on it, wall the wall clock at the same time).
func (s *NVMLSource) Busy(uuid string, mono uint64, wall time.Time) (Window, bool, error) {
	if s.handles == nil {
		s.handles, s.last = map[string]nvml.Device{}, map[string]uint64{}
	}
	h, ok := s.handles[uuid]
	if !ok {
		d, ret := s.Lib.DeviceGetHandleByUUID(uuid)
		if ret != nvml.SUCCESS {
			return Window{}, false, fmt.Errorf("GPU %s: handle: %v", uuid, ret)
		}
		h, s.handles[uuid] = d, d
	}
	last := s.last[uuid]
	vt, samples, ret := h.GetSamples(nvml.GPU_UTILIZATION_SAMPLES, last)
	if ret == nvml.ERROR_NOT_FOUND {
		return Window{}, false, nil
	}
	if ret != nvml.SUCCESS {
		return Window{}, false, fmt.Errorf("GPU %s: utilization samples: %v", uuid, ret)
	}
	prev, busy := last, 0.0
	for _, sm := range samples {
		if sm.TimeStamp <= prev {
			continue
		}
		if prev != 0 {
			busy += min(max(sampleValue(vt, sm.SampleValue), 0), 100) / 100 * float64(sm.TimeStamp-prev) * 1000
		}
		prev = sm.TimeStamp
	}
	s.last[uuid] = prev
	if last == 0 || prev == last {
		return Window{}, false, nil
	}
	// wall µs -> monotonic ns
	off := float64(mono) - float64(wall.UnixNano())
	toMono := func(us uint64) uint64 { return uint64(max(float64(us)*1000+off, 0)) }
	return Window{StartNs: toMono(last), EndNs: toMono(prev), BusyNs: busy}, true, nil
}

func sampleValue(vt nvml.ValueType, v [8]byte) float64 {
	le := binary.LittleEndian
	switch vt {
	case nvml.VALUE_TYPE_DOUBLE:
		return math.Float64frombits(le.Uint64(v[:]))
	case nvml.VALUE_TYPE_UNSIGNED_LONG, nvml.VALUE_TYPE_UNSIGNED_LONG_LONG:
		return float64(le.Uint64(v[:]))
	default:
		return float64(le.Uint32(v[:]))
	}
}
