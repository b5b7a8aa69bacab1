package compute

import (
	"encoding/binary"
	"fmt"
	"math"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// NVMLSource reads GPU-wide utilization samples (nvmlDeviceGetSamples,
// about ten a second on an H100) for the fast loop, and per-process
// utilization samples (nvmlDeviceGetProcessUtilization, about one per
// process a second, keyed by host pids) for the calibration.
type NVMLSource struct {
	Lib nvml.Interface // initialized
	// clock: whether the driver has nvmlDeviceGetClockInfo (0: not looked
	// up yet, 1 yes, -1 no); a call to a function it lacks ends the process
	clock   int
	handles map[string]nvml.Device
	last    map[string]uint64 // newest sample timestamp seen, µs
	procs   map[string]*procCursor
}

type procCursor struct {
	last uint64            // newest per-process sample timestamp seen, µs
	pid  map[uint32]uint64 // each pid's newest sample timestamp, µs
	// periodUs is the driver's per-process sampling period: the shortest
	// gap seen between two samples of one pid (0: none seen yet).
	periodUs uint64
}

var (
	_ Source        = (*NVMLSource)(nil)
	_ ProcessSource = (*NVMLSource)(nil)
	_ ClockSource   = (*NVMLSource)(nil)
)

// procSpanUs is the longest window a per-process sample covers (a real
// H100 gives about one a second, an H200 (driver 580) one every 200 ms).
// minProcPeriodUs: a gap between one pid's samples shorter than this is
// not taken for the driver's period.
const (
	procSpanUs      = 1_000_000
	minProcPeriodUs = 50_000
)

func (s *NVMLSource) handle(uuid string) (nvml.Device, error) {
	if s.handles == nil {
		s.handles, s.last, s.procs = map[string]nvml.Device{}, map[string]uint64{}, map[string]*procCursor{}
	}
	if h, ok := s.handles[uuid]; ok {
		return h, nil
	}
	d, ret := s.Lib.DeviceGetHandleByUUID(uuid)
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("GPU %s: handle: %v", uuid, ret)
	}
	s.handles[uuid] = d
	return d, nil
}

// ClockMHz is the GPU's SM clock now (ClockSource).
func (s *NVMLSource) ClockMHz(uuid string) (float64, bool) {
	if s.clock == 0 {
		s.clock = -1
		if s.Lib.Extensions().LookupSymbol("nvmlDeviceGetClockInfo") == nil {
			s.clock = 1
		}
	}
	if s.clock < 0 {
		return 0, false
	}
	h, err := s.handle(uuid)
	if err != nil {
		return 0, false
	}
	mhz, ret := h.GetClockInfo(nvml.CLOCK_SM)
	if ret != nvml.SUCCESS || mhz == 0 {
		return 0, false
	}
	return float64(mhz), true
}

// ProcessUtilization is h.GetProcessUtilization, which go-nvml (v0.13)
// implements as a count query and a second call into a buffer of that size,
// then slices the buffer by the count the second call set. When samples
// arrive between the two calls (a sampling period ends; the driver can do
// that as well as the fake), the second call answers INSUFFICIENT_SIZE with a
// larger count and the slice panics. That is a lost race, not an error: it
// reads as INSUFFICIENT_SIZE with nothing, and the next poll asks again from
// the same timestamp. Every caller of GetProcessUtilization goes through it
// (the gpu check's per-pid summary crashed there on the fake driver).
func ProcessUtilization(h nvml.Device, lastSeen uint64) (samples []nvml.ProcessUtilizationSample, ret nvml.Return) {
	defer func() {
		if recover() != nil {
			samples, ret = nil, nvml.ERROR_INSUFFICIENT_SIZE
		}
	}()
	return h.GetProcessUtilization(lastSeen)
}

// Processes returns the per-process samples newer than the last call's,
// each over the driver's sampling period (the shortest gap between one pid's
// samples; until one is seen, the time since its pid's previous sample; at
// most procSpanUs), on CLOCK_MONOTONIC.
func (s *NVMLSource) Processes(uuid string, mono uint64, wall time.Time) ([]ProcessSample, error) {
	h, err := s.handle(uuid)
	if err != nil {
		return nil, err
	}
	c := s.procs[uuid]
	if c == nil {
		c = &procCursor{pid: map[uint32]uint64{}}
		s.procs[uuid] = c
	}
	samples, ret := ProcessUtilization(h, c.last)
	if ret == nvml.ERROR_NOT_FOUND || (ret == nvml.ERROR_INSUFFICIENT_SIZE && len(samples) == 0) {
		return nil, nil // no process ran since
	}
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("GPU %s: per-process utilization: %v (needs a driver that samples per process)", uuid, ret)
	}
	off := float64(mono) - float64(wall.UnixNano())
	toMono := func(us uint64) uint64 { return uint64(max(float64(us)*1000+off, 0)) }
	first := c.last == 0
	var out []ProcessSample
	newest := c.last
	for _, sm := range samples {
		if sm.TimeStamp <= c.last {
			continue
		}
		newest = max(newest, sm.TimeStamp)
		// A sample covers the driver's sampling period (about a second on an
		// H100, 200 ms on an H200), not the time since its pid's previous
		// one: a process idle for a while, or sampled in few rounds, is
		// absent from the samples in between (a process taking 10% of an
		// H200 had a sample in 3 rounds of 27; over the time since its
		// previous one, it would not line up with the round's others).
		prev, ok := c.pid[sm.Pid]
		if ok && prev < sm.TimeStamp && sm.TimeStamp-prev >= minProcPeriodUs &&
			(c.periodUs == 0 || sm.TimeStamp-prev < c.periodUs) {
			c.periodUs = sm.TimeStamp - prev
		}
		span := uint64(procSpanUs)
		switch {
		case c.periodUs > 0:
			span = min(c.periodUs, procSpanUs)
		case ok && prev < sm.TimeStamp:
			span = min(sm.TimeStamp-prev, procSpanUs)
		}
		prev = sm.TimeStamp - min(sm.TimeStamp, span)
		c.pid[sm.Pid] = sm.TimeStamp
		if first { // what came before the controller started is history
			continue
		}
		out = append(out, ProcessSample{PID: sm.Pid, StartNs: toMono(prev), EndNs: toMono(sm.TimeStamp),
			SM: min(float64(sm.SmUtil), 100) / 100})
	}
	c.last = newest
	for pid, ts := range c.pid {
		if newest > ts+10*procSpanUs {
			delete(c.pid, pid)
		}
	}
	return out, nil
}

// Busy sums the busy time of the samples newer than the last call's. NVML
// stamps samples with the wall clock (µs); the window is returned on
// CLOCK_MONOTONIC (mono is now on it, wall the wall clock at the same time).
func (s *NVMLSource) Busy(uuid string, mono uint64, wall time.Time) (Window, bool, error) {
	h, err := s.handle(uuid)
	if err != nil {
		return Window{}, false, err
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
