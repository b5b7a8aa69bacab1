package api

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func sampleRequests() Requests {
	return Requests{Containers: []ContainerRequest{
		{Name: "setup", Init: true, Number: 1, MemoryPercent: 10, GPUMemoryMiB: 23034},
		{Name: "train", Number: 2, MemoryMiB: 8192, Cores: 25},
	}}
}

func TestRequestsRoundTrip(t *testing.T) {
	in := sampleRequests()
	s, err := EncodeRequests(in)
	if err != nil {
		t.Fatal(err)
	}
	out, err := DecodeRequests(s)
	if err != nil {
		t.Fatal(err)
	}
	in.Version = Version
	if d := cmp.Diff(in, out); d != "" {
		t.Errorf("round trip (-in +out):\n%s", d)
	}
	if c, ok := out.Container("setup", true); !ok || c.MemoryPercent != 10 {
		t.Errorf("Container(setup, init) = %+v, %v", c, ok)
	}
}

func TestRequestTotals(t *testing.T) {
	tests := []struct {
		name           string
		c              ContainerRequest
		wantMem, wantC int64
	}{
		{name: "MiB per GPU", c: ContainerRequest{Number: 2, MemoryMiB: 8192, Cores: 25}, wantMem: 16384, wantC: 50},
		{name: "percentage", c: ContainerRequest{Number: 2, MemoryPercent: 50, Cores: 10, GPUMemoryMiB: 23034}, wantMem: 23034, wantC: 20},
		{name: "whole GPU counts its memory and 100 cores", c: ContainerRequest{Number: 4, GPUMemoryMiB: 40960}, wantMem: 163840, wantC: 400},
		{name: "memory only, no cores", c: ContainerRequest{Number: 1, MemoryMiB: 4096}, wantMem: 4096, wantC: 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if m, c := tc.c.Totals(); m != tc.wantMem || c != tc.wantC {
				t.Errorf("Totals = %d MiB, %d cores; want %d, %d", m, c, tc.wantMem, tc.wantC)
			}
		})
	}
}

func TestDecodeRequestsErrors(t *testing.T) {
	good, _ := EncodeRequests(sampleRequests())
	tests := []struct{ name, value, want string }{
		{"no GPUs", strings.Replace(good, `"number":2`, `"number":0`, 1), "field containers[1].number: expected 1 to 64 GPUs, got 0"},
		{"cores over 100", strings.Replace(good, `"cores":25`, `"cores":250`, 1), "field containers[1].cores: expected 0 (not asked) to 100, got 250"},
		{"percentage without the GPU size", strings.Replace(good, `,"gpuMemoryMiB":23034`, ``, 1), "field containers[0].gpuMemoryMiB: expected the GPU size"},
		{"unknown field", strings.Replace(good, `"number":2`, `"number":2,"gpus":2`, 1), "unknown field"},
		{"listed twice", strings.Replace(good, `"name":"train"`, `"name":"setup","init":true`, 1), "expected a container listed once"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := DecodeRequests(tc.value)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("DecodeRequests error = %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

// FuzzDecodeRequests: as FuzzDecodeInventory, for the admission payload.
func FuzzDecodeRequests(f *testing.F) {
	good, _ := EncodeRequests(sampleRequests())
	f.Add(good)
	f.Add(`{"version":"v1","containers":[]}`)
	f.Fuzz(func(t *testing.T, s string) {
		r, err := DecodeRequests(s)
		if err != nil {
			return
		}
		again, err := EncodeRequests(r)
		if err != nil {
			t.Fatalf("decoded requests do not encode: %v", err)
		}
		back, err := DecodeRequests(again)
		if err != nil {
			t.Fatalf("re-encoded requests do not decode: %v", err)
		}
		if d := cmp.Diff(r, back); d != "" {
			t.Fatalf("round trip changed the requests:\n%s", d)
		}
		for _, c := range r.Containers {
			if m, k := c.Totals(); m < 0 || k < 0 {
				t.Fatalf("negative totals %d, %d for %+v", m, k, c)
			}
		}
	})
}
