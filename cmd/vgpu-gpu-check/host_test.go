package main

import (
	"testing"
	"time"
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
