package podresources

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
)

func TestSnapshot(t *testing.T) {
	const res = "volcano.sh/vgpu-number"
	s := NewSnapshot(&podresourcesv1.ListPodResourcesResponse{PodResources: []*podresourcesv1.PodResources{
		{Namespace: "ns", Name: "a", Containers: []*podresourcesv1.ContainerResources{
			{Name: "main", Devices: []*podresourcesv1.ContainerDevices{
				{ResourceName: res, DeviceIds: []string{"GPU-b::1", "GPU-a::0"}},
				{ResourceName: "example.com/other", DeviceIds: []string{"x"}},
			}},
		}},
		{Namespace: "ns", Name: "cpu-only", Containers: []*podresourcesv1.ContainerResources{{Name: "c"}}},
	}}, res)
	if !s.Known("ns", "a") || !s.Known("ns", "cpu-only") || s.Known("ns", "b") {
		t.Error("Known is wrong")
	}
	cs, _ := s.Containers("ns", "a")
	if d := cmp.Diff(map[string][]string{"main": {"GPU-a::0", "GPU-b::1"}}, cs); d != "" {
		t.Errorf("containers (-want +got):\n%s", d) // sorted, other resources dropped
	}
	if d := cmp.Diff([]string{"ns/a/main"}, s.Holders([]string{"GPU-b::1", "GPU-z::0"})); d != "" {
		t.Errorf("holders (-want +got):\n%s", d)
	}
	if !s.HasDevices("ns/a") || s.HasDevices("ns/cpu-only") {
		t.Error("HasDevices is wrong")
	}
	if d := cmp.Diff([]string{"ns/a", "ns/cpu-only"}, s.Pods()); d != "" {
		t.Errorf("pods (-want +got):\n%s", d)
	}
}
