package main

import (
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
)

func TestDevSampler(t *testing.T) {
	busy := []uint32{97, 100, 99, 98} // mean 98.5
	dev := &mock.Device{
		GetUtilizationRatesFunc: func() (nvml.Utilization, nvml.Return) {
			u := busy[0]
			busy = busy[1:]
			return nvml.Utilization{Gpu: u}, nvml.SUCCESS
		},
		GetClockInfoFunc: func(c nvml.ClockType) (uint32, nvml.Return) {
			if c != nvml.CLOCK_SM {
				t.Errorf("clock %v read, want the SM clock", c)
			}
			return 1473, nvml.SUCCESS
		},
		GetPowerUsageFunc: func() (uint32, nvml.Return) { return 693400, nvml.SUCCESS },
	}
	tests := []struct {
		name         string
		clock, power bool
		want         string
		wantBusy     float64
	}{
		{name: "every reading", clock: true, power: true, want: "device 98% busy (mean), SM 1473 MHz, 693 W (medians) of 4 reads", wantBusy: 98.5},
		{name: "a driver without the clock and power calls: never called", want: "device 98% busy (mean) of 4 reads", wantBusy: 98.5},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			busy = []uint32{97, 100, 99, 98}
			s := &devSampler{dev: dev, clock: tc.clock, power: tc.power}
			if !tc.clock {
				dev.GetClockInfoFunc, dev.GetPowerUsageFunc = nil, nil // the mock panics on a call
			}
			for range 4 {
				s.read()
			}
			if got := s.summary(); got != tc.want {
				t.Errorf("summary = %q, want %q", got, tc.want)
			}
			if b, ok := s.busyMean(); !ok || b != tc.wantBusy {
				t.Errorf("busyMean = %v, %v; want %v", b, ok, tc.wantBusy)
			}
		})
	}
	var none *devSampler
	if got := none.summary(); got != "" {
		t.Errorf("a row that never sampled: summary %q, want none", got)
	}
	if _, ok := (&devSampler{}).busyMean(); ok {
		t.Error("busyMean without readings: ok")
	}
}
