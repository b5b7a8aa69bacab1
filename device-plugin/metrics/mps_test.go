package metrics

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/volcano-vgpu/volcano-vgpu/api"
)

// The sharing mode, the MPS daemon's health and the MPS shares of containers.
func TestMPSSeries(t *testing.T) {
	names := []string{"volcano_vgpu_gpu_sharing_mode", "volcano_vgpu_gpu_mps_daemon_up", "volcano_vgpu_gpu_mps_daemon_failure",
		"volcano_vgpu_gpu_mps_daemon_failures_total", "volcano_vgpu_gpu_mps_server_active_thread_ratio",
		"volcano_vgpu_container_mps_active_thread_ratio", "volcano_vgpu_container_mps_pinned_memory_limit_bytes"}
	const (
		helpMode = `# HELP volcano_vgpu_gpu_sharing_mode 1 for the sharing mode of the GPU (mode: time-sliced, mps), as the node's inventory publishes it.
# TYPE volcano_vgpu_gpu_sharing_mode gauge
`
		helpUp = `# HELP volcano_vgpu_gpu_mps_daemon_up 1 while the MPS GPU's control daemon answers and its server is ACTIVE with no fatal fault, 0 otherwise (the GPU is then unhealthy).
# TYPE volcano_vgpu_gpu_mps_daemon_up gauge
`
		helpDown = `# HELP volcano_vgpu_gpu_mps_daemon_failure 1 for why the MPS GPU's daemon is not up (reason: server_fault, no_answer, daemon_start, server_start, compute_mode, unchecked, other).
# TYPE volcano_vgpu_gpu_mps_daemon_failure gauge
`
		helpFails = `# HELP volcano_vgpu_gpu_mps_daemon_failures_total Checks of the MPS GPU's daemon that found a new failure (after it was up, or failing for another reason), by reason.
# TYPE volcano_vgpu_gpu_mps_daemon_failures_total counter
`
		helpCeil = `# HELP volcano_vgpu_gpu_mps_server_active_thread_ratio Active-thread fraction the MPS GPU's server is held to: the largest share booked on the GPU (what a client that raises its own percentage can reach).
# TYPE volcano_vgpu_gpu_mps_server_active_thread_ratio gauge
`
		helpThreads = `# HELP volcano_vgpu_container_mps_active_thread_ratio MPS active-thread fraction of a container on an MPS GPU (CUDA_MPS_ACTIVE_THREAD_PERCENTAGE / 100), for each of its processes.
# TYPE volcano_vgpu_container_mps_active_thread_ratio gauge
`
		helpPinned = `# HELP volcano_vgpu_container_mps_pinned_memory_limit_bytes MPS pinned device memory limit of a container on an MPS GPU (CUDA_MPS_PINNED_DEVICE_MEM_LIMIT), per process; libvcuda caps the container as a whole.
# TYPE volcano_vgpu_container_mps_pinned_memory_limit_bytes gauge
`
	)
	gpuA := GPU{UUID: "GPU-a", Model: "H100", Index: 0, Healthy: true}
	gpuB := GPU{UUID: "GPU-b", Model: "H100", Index: 1, Healthy: true, Mode: api.ModeMPS}
	for _, tc := range []struct {
		name string
		snap Snapshot
		want string
	}{
		{
			name: "a time-sliced GPU (no mode in the inventory) has only its mode",
			snap: Snapshot{GPUs: []GPU{gpuA}, Containers: []Container{{Namespace: "ns", Pod: "p", Container: "c", UUID: "GPU-a", Model: "H100", MemoryMiB: 1024, Cores: 30}}},
			want: helpMode + `volcano_vgpu_gpu_sharing_mode{gpu_index="0",gpu_uuid="GPU-a",mode="time-sliced",model="H100"} 1
`,
		},
		{
			name: "an MPS GPU up, held at 60% (a 30% and a 60% tenant), one fault since the start",
			snap: Snapshot{
				GPUs: []GPU{func() GPU {
					g := gpuB
					g.MPS = &MPSDaemon{Up: true, Threads: 60, Failures: map[string]uint64{"server_fault": 1}}
					return g
				}()},
				Containers: []Container{
					{Namespace: "ns", Pod: "p", Container: "c", UUID: "GPU-b", Index: 1, Model: "H100", MemoryMiB: 2048, Cores: 30, MPSThreads: 30, MPSPinnedMiB: 2048},
					{Namespace: "ns", Pod: "q", Container: "c", UUID: "GPU-b", Index: 1, Model: "H100", MemoryMiB: 4096, Cores: 60, MPSThreads: 60, MPSPinnedMiB: 4096},
				},
			},
			want: helpMode + `volcano_vgpu_gpu_sharing_mode{gpu_index="1",gpu_uuid="GPU-b",mode="mps",model="H100"} 1
` + helpUp + `volcano_vgpu_gpu_mps_daemon_up{gpu_index="1",gpu_uuid="GPU-b",model="H100"} 1
` + helpFails + `volcano_vgpu_gpu_mps_daemon_failures_total{gpu_index="1",gpu_uuid="GPU-b",model="H100",reason="server_fault"} 1
` + helpCeil + `volcano_vgpu_gpu_mps_server_active_thread_ratio{gpu_index="1",gpu_uuid="GPU-b",model="H100"} 0.6
` + helpThreads + `volcano_vgpu_container_mps_active_thread_ratio{container="c",gpu_index="1",gpu_uuid="GPU-b",model="H100",namespace="ns",pod="p"} 0.3
volcano_vgpu_container_mps_active_thread_ratio{container="c",gpu_index="1",gpu_uuid="GPU-b",model="H100",namespace="ns",pod="q"} 0.6
` + helpPinned + `volcano_vgpu_container_mps_pinned_memory_limit_bytes{container="c",gpu_index="1",gpu_uuid="GPU-b",model="H100",namespace="ns",pod="p"} 2.147483648e+09
volcano_vgpu_container_mps_pinned_memory_limit_bytes{container="c",gpu_index="1",gpu_uuid="GPU-b",model="H100",namespace="ns",pod="q"} 4.294967296e+09
`,
		},
		{
			name: "an MPS GPU whose daemon does not answer: down with its reason",
			snap: Snapshot{GPUs: []GPU{func() GPU {
				g := gpuB
				g.Healthy = false
				g.MPS = &MPSDaemon{Reason: "no_answer", Threads: 100, Failures: map[string]uint64{"no_answer": 2, "server_fault": 1}}
				return g
			}()}},
			want: helpMode + `volcano_vgpu_gpu_sharing_mode{gpu_index="1",gpu_uuid="GPU-b",mode="mps",model="H100"} 1
` + helpUp + `volcano_vgpu_gpu_mps_daemon_up{gpu_index="1",gpu_uuid="GPU-b",model="H100"} 0
` + helpDown + `volcano_vgpu_gpu_mps_daemon_failure{gpu_index="1",gpu_uuid="GPU-b",model="H100",reason="no_answer"} 1
` + helpFails + `volcano_vgpu_gpu_mps_daemon_failures_total{gpu_index="1",gpu_uuid="GPU-b",model="H100",reason="no_answer"} 2
volcano_vgpu_gpu_mps_daemon_failures_total{gpu_index="1",gpu_uuid="GPU-b",model="H100",reason="server_fault"} 1
` + helpCeil + `volcano_vgpu_gpu_mps_server_active_thread_ratio{gpu_index="1",gpu_uuid="GPU-b",model="H100"} 1
`,
		},
		{
			name: "an MPS GPU not checked yet: down, unchecked, no server ratio",
			snap: Snapshot{GPUs: []GPU{func() GPU { g := gpuB; g.MPS = &MPSDaemon{}; return g }()}},
			want: helpMode + `volcano_vgpu_gpu_sharing_mode{gpu_index="1",gpu_uuid="GPU-b",mode="mps",model="H100"} 1
` + helpUp + `volcano_vgpu_gpu_mps_daemon_up{gpu_index="1",gpu_uuid="GPU-b",model="H100"} 0
` + helpDown + `volcano_vgpu_gpu_mps_daemon_failure{gpu_index="1",gpu_uuid="GPU-b",model="H100",reason="unchecked"} 1
`,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			New(reg, func() Snapshot { return tc.snap })
			if err := testutil.GatherAndCompare(reg, strings.NewReader(tc.want), names...); err != nil {
				t.Error(err)
			}
			if problems, err := testutil.GatherAndLint(reg); err != nil || len(problems) != 0 {
				t.Errorf("lint: %v %v", problems, err)
			}
		})
	}
}
