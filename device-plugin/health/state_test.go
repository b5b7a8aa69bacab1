package health

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/gpu"
)

func TestStateRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), StateFile)
	empty, err := LoadState(path)
	if err != nil || len(empty.Unhealthy) != 0 || len(empty.GPUs) != 0 {
		t.Fatalf("missing file: %+v, %v; want an empty state", empty, err)
	}
	want := State{
		GPUs:      []gpu.Device{{Index: 0, UUID: "GPU-a", Model: "A100", BusID: "0000:1a:00.0", MemoryMiB: 40960, NUMA: 0}},
		Unhealthy: map[string]Unhealthy{"GPU-a": {Since: t0, LastBad: t0.Add(time.Minute), XID: 79, Reason: "critical Xid"}},
	}
	if err := SaveState(path, want); err != nil {
		t.Fatal(err)
	}
	got, err := LoadState(path)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("state (-saved +loaded):\n%s", d)
	}
}

func TestLoadStateRejectsBadFiles(t *testing.T) {
	tests := []struct {
		name, data, says string
	}{
		{name: "not JSON", data: "{", says: "unexpected EOF"},
		{name: "unknown version", data: `{"version":"v2","gpus":[],"unhealthy":[]}`, says: `expected "v1", got "v2"`},
		{name: "unknown key", data: `{"version":"v1","gpus":[],"unhealthy":[],"extra":1}`, says: `unknown field "extra"`},
		{name: "unhealthy without uuid", data: `{"version":"v1","gpus":[],"unhealthy":[{"since":"2026-01-01T00:00:00Z","lastBad":"2026-01-01T00:00:00Z","reason":"x"}]}`, says: "unhealthy[0]"},
		{name: "GPU without memory", data: `{"version":"v1","gpus":[{"index":0,"uuid":"GPU-a","model":"A100","memoryMiB":0}],"unhealthy":[]}`, says: "gpus[0]"},
		{name: "two objects", data: `{"version":"v1"} {}`, says: "data after"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), StateFile)
			if err := os.WriteFile(path, []byte(tc.data), 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := LoadState(path)
			if !errors.Is(err, ErrBadState) || !contains(err.Error(), tc.says) {
				t.Errorf("err = %v, want ErrBadState saying %q", err, tc.says)
			}
		})
	}
}

func TestDescribe(t *testing.T) {
	kept := []gpu.Device{
		{Index: 0, UUID: "GPU-a", Model: "A100", MemoryMiB: 40960},
		{Index: 1, UUID: "GPU-b", Model: "A100", MemoryMiB: 40960},
		{Index: 2, UUID: "GPU-c", Model: "A100", MemoryMiB: 40960},
	}
	devs := []gpu.Device{
		{Index: 0, UUID: "GPU-a", Model: "A100", MemoryMiB: 40960},
		{Index: 1, Failure: "handle: ERROR_GPU_IS_LOST"},                 // by index → GPU-b
		{Index: 2, UUID: "GPU-c", Failure: "memory info: ERROR_UNKNOWN"}, // by UUID
		{Index: 3, UUID: "GPU-d", Failure: "name: ERROR_UNKNOWN"},        // never seen: offered with what is known
		{Index: 4, Failure: "handle: ERROR_UNKNOWN"},                     // nothing known: cannot be offered
	}
	got, unnamed := Describe(devs, kept)
	want := []gpu.Device{
		kept[0],
		{Index: 1, UUID: "GPU-b", Model: "A100", MemoryMiB: 40960, Failure: "handle: ERROR_GPU_IS_LOST"},
		{Index: 2, UUID: "GPU-c", Model: "A100", MemoryMiB: 40960, Failure: "memory info: ERROR_UNKNOWN"},
		{Index: 3, UUID: "GPU-d", Model: "unknown", Failure: "name: ERROR_UNKNOWN"},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("devices (-want +got):\n%s", d)
	}
	if d := cmp.Diff([]int{4}, unnamed); d != "" {
		t.Errorf("unnamed (-want +got):\n%s", d)
	}
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }
