package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"k8s.io/apimachinery/pkg/util/wait"
)

// devSampler reads the device's utilization, SM clock and power draw over
// the second half of a row, when its tenants are measured. A share's
// yardstick is its workload's solo rate, taken with the GPU full; a
// power-capped card clocks higher when it is not (an H200: SM 1473 MHz
// alone at full load, 1980 with one tenant held to 10-50% of its time), so
// a tenant held to its share of GPU time does more work than that share of
// the solo rate. These readings say which it was: the device's busy figure
// is the GPU time the limiter holds, the clock what a GPU-second did.
type devSampler struct {
	dev   nvml.Device
	every time.Duration
	// the driver has these calls (a call to one it lacks ends the process)
	clock, power     bool
	busy, mhz, watts []float64
}

func newDevSampler(lib nvml.Interface, dev nvml.Device) *devSampler {
	return &devSampler{dev: dev, every: 500 * time.Millisecond,
		clock: has(lib, "nvmlDeviceGetClockInfo"), power: has(lib, "nvmlDeviceGetPowerUsage")}
}

// run reads every s.every from wait until ctx ends.
func (s *devSampler) run(ctx context.Context, wait time.Duration) {
	ticks(ctx, wait, s.every, s.read)
}

// ticks calls f after delay, then every period, until ctx ends.
func ticks(ctx context.Context, delay, period time.Duration, f func()) {
	select {
	case <-ctx.Done():
		return
	case <-time.After(delay):
	}
	wait.UntilWithContext(ctx, func(context.Context) { f() }, period)
}

func (s *devSampler) read() {
	if u, ret := s.dev.GetUtilizationRates(); ret == nvml.SUCCESS {
		s.busy = append(s.busy, float64(u.Gpu))
	}
	if s.clock {
		if c, ret := s.dev.GetClockInfo(nvml.CLOCK_SM); ret == nvml.SUCCESS && c > 0 {
			s.mhz = append(s.mhz, float64(c))
		}
	}
	if s.power {
		if mw, ret := s.dev.GetPowerUsage(); ret == nvml.SUCCESS && mw > 0 {
			s.watts = append(s.watts, float64(mw)/1000)
		}
	}
}

// busyMean is the device's mean utilization, percent: its GPU time (a
// lone tenant at 90% on 200 ms samples alternates between busy windows and
// a few at 70%; their median read 100); ok is false without readings.
func (s *devSampler) busyMean() (float64, bool) {
	if s == nil || len(s.busy) == 0 {
		return 0, false
	}
	return mean(s.busy), true
}

// summary: "device 98% busy (mean), SM 1473 MHz, 693 W (medians) of 10
// reads", with what the driver gave; "" without any reading.
func (s *devSampler) summary() string {
	if s == nil {
		return ""
	}
	var parts []string
	n := 0
	if len(s.busy) > 0 {
		parts = append(parts, fmt.Sprintf("device %.0f%% busy (mean)", mean(s.busy)))
		n = len(s.busy)
	}
	if len(s.mhz) > 0 {
		parts = append(parts, fmt.Sprintf("SM %.0f MHz", median(s.mhz)))
		n = max(n, len(s.mhz))
	}
	if len(s.watts) > 0 {
		parts = append(parts, fmt.Sprintf("%.0f W", median(s.watts)))
		n = max(n, len(s.watts))
	}
	if len(parts) == 0 {
		return ""
	}
	med := ""
	if len(s.mhz)+len(s.watts) > 0 {
		med = " (medians)"
	}
	return fmt.Sprintf("%s%s of %d reads", strings.Join(parts, ", "), med, n)
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
