package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
)

func TestLagSummary(t *testing.T) {
	ms := time.Millisecond
	tests := []struct {
		name string
		lags []time.Duration
		want string
	}{
		{name: "none", lags: nil, want: ""},
		{name: "one", lags: []time.Duration{120 * ms}, want: "device samples read 120 ms late (median of 1; max 120)"},
		{name: "unsorted, median and max", lags: []time.Duration{300 * ms, 20 * ms, 110 * ms, 90 * ms, 100 * ms},
			want: "device samples read 100 ms late (median of 5; max 300)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := append([]time.Duration(nil), tt.lags...)
			if got := lagSummary(tt.lags); got != tt.want {
				t.Errorf("lagSummary(%v) = %q, want %q", tt.lags, got, tt.want)
			}
			for i := range in {
				if in[i] != tt.lags[i] {
					t.Fatalf("lagSummary reordered its input: %v, was %v", tt.lags, in)
				}
			}
		})
	}
}

func TestFitSummary(t *testing.T) {
	tests := []struct {
		name            string
		fitted, periods int
		want            string
	}{
		{name: "no periods", want: ""},
		{name: "pooled throughout", periods: 50, want: ""},
		{name: "fitted in some", fitted: 31, periods: 50, want: "costs fitted from the containers' turns in 31 of 50 periods"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := fitSummary(tt.fitted, tt.periods); got != tt.want {
				t.Errorf("fitSummary(%d, %d) = %q, want %q", tt.fitted, tt.periods, got, tt.want)
			}
		})
	}
}

func TestSaidSummary(t *testing.T) {
	const off = "vcuda: cuEventRecord failed (900) on GPU-1: this process's queued work is not bounded in its confining slots from now on"
	stderr := "warming up\n" + off + "\n  vcuda: GPU-1 is not in the config  \nvcuda-debug: dev 0 node 1\n"
	if got := limiterLines(stderr); len(got) != 2 || got[0] != off || got[1] != "vcuda: GPU-1 is not in the config" {
		t.Fatalf("limiterLines = %q", got)
	}
	tests := []struct {
		name string
		said [][]string
		want string
	}{
		{name: "nothing said", said: [][]string{nil, nil}, want: ""},
		{name: "one tenant", said: [][]string{nil, {off}}, want: off + " (t2)"},
		{name: "both, once each", said: [][]string{{off, "vcuda: x"}, {off}}, want: off + " (t1, t2); vcuda: x (t1)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var ts []*tenant
			for _, s := range tt.said {
				ts = append(ts, &tenant{said: s})
			}
			if got := saidSummary(ts); got != tt.want {
				t.Errorf("saidSummary = %q, want %q", got, tt.want)
			}
		})
	}
}

// go-nvml's GetProcessUtilization slices its buffer by the count of a second
// call; a sample arriving between its two calls makes that count larger and
// the slice panics (the rehearsal's balance row crashed the check there, on
// the fake driver). The sampler reads on through it.
func TestPidSamplerSurvivesTheRace(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	calls := 0
	dev := &mock.Device{GetProcessUtilizationFunc: func(last uint64) ([]nvml.ProcessUtilizationSample, nvml.Return) {
		calls++
		if calls == 1 {
			buf := make([]nvml.ProcessUtilizationSample, 2)
			n := len(buf) + calls // the second call's larger count
			return buf[:n], nvml.ERROR_INSUFFICIENT_SIZE
		}
		if calls == 3 {
			cancel()
		}
		return []nvml.ProcessUtilizationSample{{Pid: 10, TimeStamp: last + 1, SmUtil: 40}}, nvml.SUCCESS
	}}
	s := newPidSampler(dev, func() map[int]string { return map[int]string{10: "a"} })
	s.every = time.Millisecond
	s.run(ctx, 0)
	if got := s.summary([]string{"a"}); !strings.Contains(got, "sm% 40 (2 samples)") {
		t.Errorf("summary %q after the race, want the sample read after it", got)
	}
}
