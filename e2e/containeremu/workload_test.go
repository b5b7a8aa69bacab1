package containeremu

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestWorkloadArgv(t *testing.T) {
	got := Workload{Device: 1, ChunkMiB: 1, HoldMiB: 512, Seconds: 2.5}.Argv()
	want := []string{WorkloadPath, "--device", "1", "--seconds", "2.5", "--chunk-mib", "1", "--hold-mib", "512"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("argv (-want +got):\n%s", diff)
	}
}

func TestParseSummary(t *testing.T) {
	share := 0.2969
	for _, tc := range []struct {
		name    string
		out     string
		want    Summary
		wantErr string
	}{
		{
			name: "the last JSON line, after other output",
			out: "warming up\n" + `{"ok":true,"devices":["GPU-1"],"device":0,"held_mib":512,"cuda_total_mib":8192,"cuda_free_mib":7680,` +
				`"nvml_total_mib":8192,"nvml_used_mib":512,"alloc_chunk_mib":1,"allocated_bytes":8053063680,"alloc_error":2,` +
				`"launches":2945,"launch_seconds":2.000,"half_launches":1470,"half_seconds":1.001,"end_cuda_free_mib":7680,"end_nvml_used_mib":512,"util_share":0.2969}` + "\n",
			want: Summary{OK: true, Devices: []string{"GPU-1"}, HeldMiB: 512, CUDATotalMiB: 8192, CUDAFreeMiB: 7680, NVMLTotalMiB: 8192,
				NVMLUsedMiB: 512, AllocChunkMiB: 1, AllocatedBytes: 8053063680, AllocError: CUDAErrorOutOfMemory, Launches: 2945,
				LaunchSeconds: 2, HalfLaunches: 1470, HalfSeconds: 1.001, EndCUDAFreeMiB: 7680, EndNVMLUsedMiB: 512, UtilShare: &share},
		},
		{name: "a failure", out: `{"ok":false,"error":"cuInit failed: 100"}`, want: Summary{Error: "cuInit failed: 100"}},
		{name: "an unknown field: the program changed", out: `{"ok":true,"gpus":2}`, wantErr: `unknown field "gpus"`},
		{name: "no JSON", out: "Segmentation fault\n", wantErr: "no JSON summary"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseSummary(tc.out)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("summary (-want +got):\n%s", diff)
			}
		})
	}
	// 512 held + 7680 allocated = 8192
	if got := (Summary{HeldMiB: 512, AllocatedBytes: 7680 << 20}).AllocatableMiB(); got != 8192 {
		t.Errorf("AllocatableMiB = %d, want 8192", got)
	}
}
