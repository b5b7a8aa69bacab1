package main

import (
	"strings"
	"testing"
	"time"
)

func TestMemBound(t *testing.T) {
	for _, tc := range []struct {
		name            string
		capMiB, freeMiB uint64
		want            int
		wantErr         string
	}{
		{name: "an H100: 2 GiB past the cap", capMiB: 8192, freeMiB: 80552, want: 10},                                             // (8192+2048)/1024
		{name: "the card's free memory bounds the loop", capMiB: 8192, freeMiB: 12000, want: 9},                                   // (12000-2048)/1024 = 9 chunks, 9216 > 8192
		{name: "a cap above the card cannot be shown", capMiB: 81920, freeMiB: 80552, wantErr: "lower -cap-mib to at most 76800"}, // (80552-2048)/1024 = 76 chunks; 75 GiB
		{name: "room for exactly the cap is not enough", capMiB: 8192, freeMiB: 10240, wantErr: "lower -cap-mib to at most 7168"}, // 8 chunks = the cap
		{name: "an almost full card", capMiB: 1024, freeMiB: 1500, wantErr: "or free GPU memory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := memBound(tc.capMiB, tc.freeMiB)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("memBound = %d, %v; want an error with %q", got, err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("memBound = %d, %v; want %d", got, err, tc.want)
			}
			if uint64(got)*chunkMiB > tc.freeMiB-spareMiB {
				t.Errorf("%d chunks ask more than the card has free (%d MiB less %d spare)", got, tc.freeMiB, spareMiB)
			}
			if uint64(got)*chunkMiB <= tc.capMiB {
				t.Errorf("%d chunks never pass the %d MiB cap", got, tc.capMiB)
			}
		})
	}
}

func TestMemSeconds(t *testing.T) {
	for _, tc := range []struct {
		name    string
		timeout time.Duration
		want    float64
	}{
		{"half the row's timeout", time.Minute, 30},
		{"at least a second", time.Second, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := memSeconds(tc.timeout); got != tc.want {
				t.Errorf("memSeconds(%v) = %g, want %g", tc.timeout, got, tc.want)
			}
		})
	}
}
