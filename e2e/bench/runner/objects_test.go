package runner

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"

	"github.com/volcano-vgpu/volcano-vgpu/e2e/bench/trace"
)

func limits(l corev1.ResourceList) map[string]string {
	out := map[string]string{}
	for k, v := range l {
		out[string(k)] = v.String()
	}
	return out
}

func TestPodResources(t *testing.T) {
	gang := trace.Job{Index: 3, Name: "j0003", Kind: trace.Gang, Pods: 2, GPUs: 4, Cores: 100, CPUMilli: 2000, HostMiB: 8192}
	frac := trace.Job{Index: 4, Name: "j0004", Kind: trace.Fraction, Pods: 1, GPUs: 1, MemoryMiB: 8192, Cores: 25, CPUMilli: 500, HostMiB: 2048}
	tests := []struct {
		name     string
		job      trace.Job
		gpu      bool
		limits   map[string]string
		requests map[string]string
	}{
		{name: "gang pod: whole GPUs by percentage, exclusive", job: gang, gpu: true,
			limits:   map[string]string{"volcano.sh/vgpu-number": "4", "volcano.sh/vgpu-memory-percentage": "100", "volcano.sh/vgpu-cores": "100"},
			requests: map[string]string{"cpu": "2", "memory": "8Gi"}},
		{name: "fraction: MiB and a core share", job: frac, gpu: true,
			limits:   map[string]string{"volcano.sh/vgpu-number": "1", "volcano.sh/vgpu-memory": "8192", "volcano.sh/vgpu-cores": "25"},
			requests: map[string]string{"cpu": "500m", "memory": "2Gi"}},
		{name: "CPU-only baseline: no GPU resources", job: gang, gpu: false,
			limits:   map[string]string{},
			requests: map[string]string{"cpu": "2", "memory": "8Gi"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := Pod(tc.job, 1, "ns", tc.gpu)
			if p.Name != tc.job.Name+"-1" || p.Annotations["scheduling.k8s.io/group-name"] != tc.job.Name || p.Spec.SchedulerName != "volcano" {
				t.Errorf("pod %s: group %q, scheduler %q", p.Name, p.Annotations["scheduling.k8s.io/group-name"], p.Spec.SchedulerName)
			}
			c := p.Spec.Containers[0]
			if diff := cmp.Diff(tc.limits, limits(c.Resources.Limits)); diff != "" {
				t.Errorf("limits (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.requests, limits(c.Resources.Requests)); diff != "" {
				t.Errorf("requests (-want +got):\n%s", diff)
			}
		})
	}
}

func TestPodGroupSumsMinMembers(t *testing.T) {
	gang := trace.Job{Name: "j0001", Kind: trace.Gang, Pods: 2, GPUs: 8, Cores: 100, CPUMilli: 2000, HostMiB: 8192}
	pg := PodGroup(gang, "ns", true)
	if pg.Spec.MinMember != 2 || pg.Spec.Queue != "default" {
		t.Errorf("minMember %d, queue %q", pg.Spec.MinMember, pg.Spec.Queue)
	}
	// 2 pods × (2 CPUs, 8 GiB, 8 GPUs, 100 cores, 100%)
	want := map[string]string{"cpu": "4", "memory": "16Gi", "volcano.sh/vgpu-number": "16",
		"volcano.sh/vgpu-cores": "200", "volcano.sh/vgpu-memory-percentage": "200"}
	if diff := cmp.Diff(want, limits(*pg.Spec.MinResources)); diff != "" {
		t.Errorf("minResources (-want +got):\n%s", diff)
	}
}
