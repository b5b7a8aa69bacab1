package compute

import (
	"errors"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/google/go-cmp/cmp"
)

// TestProcessSampleWindows: a sample covers the driver's sampling period
// (learned from one pid's consecutive samples), so that a process sampled in
// few rounds lines up with the round's others (an H200 samples every 200 ms;
// a process taking 10% of it beside a saturating one had a sample in 3
// rounds of 27).
func TestProcessSampleWindows(t *testing.T) {
	const ms = uint64(1000) // µs
	batches := [][]nvml.ProcessUtilizationSample{
		{{Pid: 1, TimeStamp: 1000 * ms, SmUtil: 90}},                                             // history: skipped
		{{Pid: 1, TimeStamp: 1200 * ms, SmUtil: 90}},                                             // 1's gap: 200 ms
		{{Pid: 1, TimeStamp: 1400 * ms, SmUtil: 98}, {Pid: 2, TimeStamp: 1400 * ms, SmUtil: 98}}, // 2 first seen
		{{Pid: 1, TimeStamp: 2600 * ms, SmUtil: 50}, {Pid: 2, TimeStamp: 2600 * ms, SmUtil: 40}}, // after 1.2 s idle
	}
	call := 0
	dev := &mock.Device{GetProcessUtilizationFunc: func(last uint64) ([]nvml.ProcessUtilizationSample, nvml.Return) {
		b := batches[call]
		call++
		return b, nvml.SUCCESS
	}}
	lib := &mock.Interface{DeviceGetHandleByUUIDFunc: func(string) (nvml.Device, nvml.Return) { return dev, nvml.SUCCESS }}
	s := &NVMLSource{Lib: lib}
	wall := time.Unix(0, 0) // wall and monotonic clocks agree: µs stamps read as ns ×1000
	var got [][]ProcessSample
	for range batches {
		b, err := s.Processes("GPU-x", 0, wall)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, b)
	}
	msNs := uint64(1e6)
	want := [][]ProcessSample{
		nil,
		{{PID: 1, StartNs: 1000 * msNs, EndNs: 1200 * msNs, SM: 0.9}},
		{{PID: 1, StartNs: 1200 * msNs, EndNs: 1400 * msNs, SM: 0.98}, {PID: 2, StartNs: 1200 * msNs, EndNs: 1400 * msNs, SM: 0.98}},
		{{PID: 1, StartNs: 2400 * msNs, EndNs: 2600 * msNs, SM: 0.5}, {PID: 2, StartNs: 2400 * msNs, EndNs: 2600 * msNs, SM: 0.4}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("sample windows (-want +got):\n%s", diff)
	}
}

// A sample arriving between go-nvml's two calls: its slice panics, and the
// poll reads it as a lost race (INSUFFICIENT_SIZE, nothing), not a crash.
func TestProcessUtilizationLostRace(t *testing.T) {
	dev := &mock.Device{GetProcessUtilizationFunc: func(uint64) ([]nvml.ProcessUtilizationSample, nvml.Return) {
		buf := make([]nvml.ProcessUtilizationSample, 2)
		n := len(buf) + 1
		return buf[:n], nvml.SUCCESS
	}}
	got, ret := ProcessUtilization(dev, 0)
	if got != nil || ret != nvml.ERROR_INSUFFICIENT_SIZE {
		t.Errorf("ProcessUtilization = %v, %v; want nothing, INSUFFICIENT_SIZE", got, ret)
	}
}

// The SM clock where the driver has the call; a driver without it is never
// called (the call would end the process), and reads no clock.
func TestNVMLSourceClock(t *testing.T) {
	dev := &mock.Device{GetClockInfoFunc: func(c nvml.ClockType) (uint32, nvml.Return) {
		if c != nvml.CLOCK_SM {
			t.Errorf("clock %v read, want the SM clock", c)
		}
		return 1473, nvml.SUCCESS
	}}
	for _, tt := range []struct {
		name    string
		missing bool
		want    float64
		wantOK  bool
	}{
		{name: "a driver with nvmlDeviceGetClockInfo", want: 1473, wantOK: true},
		{name: "a driver without it", missing: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ext := &mock.ExtendedInterface{LookupSymbolFunc: func(s string) error {
				if tt.missing {
					return errors.New("undefined symbol: " + s)
				}
				return nil
			}}
			lib := &mock.Interface{
				DeviceGetHandleByUUIDFunc: func(string) (nvml.Device, nvml.Return) { return dev, nvml.SUCCESS },
				ExtensionsFunc:            func() nvml.ExtendedInterface { return ext },
			}
			s := &NVMLSource{Lib: lib}
			for range 2 {
				got, ok := s.ClockMHz("GPU-x")
				if got != tt.want || ok != tt.wantOK {
					t.Errorf("ClockMHz = %v, %v; want %v, %v", got, ok, tt.want, tt.wantOK)
				}
			}
			if n := len(ext.LookupSymbolCalls()); n != 1 {
				t.Errorf("the symbol looked up %d times, want once", n)
			}
		})
	}
}

// clockOver is the mean of the clock readings within a window (the nearest
// where none is); old ones go.
func TestClockOver(t *testing.T) {
	var g gpuSamples
	ms := uint64(time.Millisecond)
	for i, mhz := range []float64{1980, 1980, 1473, 1473, 1500} {
		g.addClock(uint64(i)*100*ms, mhz)
	}
	if got := g.clockOver(150*ms, 350*ms); got != 1473 {
		t.Errorf("clockOver(150, 350 ms) = %v, want 1473", got)
	}
	if got := g.clockOver(0, 100*ms); got != 1980 {
		t.Errorf("clockOver(0, 100 ms) = %v, want 1980", got)
	}
	if got := g.clockOver(600*ms, 700*ms); got != 0 {
		t.Errorf("clockOver with no reading near = %v, want 0", got)
	}
	if got := g.clockOver(410*ms, 433*ms); got != 1500 {
		t.Errorf("clockOver(410, 433 ms), shorter than the poll = %v, want the reading 10 ms before it, 1500", got)
	}
	g.addClock(5*uint64(time.Second), 1600)
	if len(g.clocks) != 1 {
		t.Errorf("%d readings kept after 5 s, want the newest only (clockKeep)", len(g.clocks))
	}
}
