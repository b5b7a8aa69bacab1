package replica

import (
	"errors"
	"fmt"
	"testing"

	"google.golang.org/protobuf/proto"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/volcano-vgpu/volcano-vgpu/api"
)

// kubeletMaxMessage is kubelet's default gRPC receive limit.
const kubeletMaxMessage = 4 << 20

func gpus(n, shares int, uuidLen int) []api.GPU {
	out := make([]api.GPU, n)
	for i := range out {
		u := fmt.Sprintf("GPU-%0*d", uuidLen-4, i)
		out[i] = api.GPU{Index: i, UUID: u, Model: "A100", MemoryMiB: 81920, Healthy: true, NUMA: i / 4, MaxShares: shares}
	}
	return out
}

func TestRoundTrip(t *testing.T) {
	id := ID("GPU-5a7c0f2e-1d2b-4c3a-9e8f-0123456789ab", 7)
	u, k, err := Parse(id)
	if err != nil || u != "GPU-5a7c0f2e-1d2b-4c3a-9e8f-0123456789ab" || k != 7 {
		t.Fatalf("Parse(%q) = %q, %d, %v", id, u, k, err)
	}
	for _, bad := range []string{"", "GPU-1", "::3", "GPU-1::", "GPU-1::x", "GPU-1::100", "GPU-1::-1"} {
		if _, _, err := Parse(bad); !errors.Is(err, ErrBadID) {
			t.Errorf("Parse(%q) err = %v, want ErrBadID", bad, err)
		}
	}
}

func TestDevicesHealth(t *testing.T) {
	g := gpus(2, 3, 40)
	g[1].Healthy = false
	devs := Devices(g)
	if len(devs) != 6 { // 2 GPUs × 3 replicas
		t.Fatalf("got %d devices, want 6", len(devs))
	}
	if devs[0].Health != pluginapi.Healthy || devs[5].Health != pluginapi.Unhealthy {
		t.Errorf("health = %s/%s", devs[0].Health, devs[5].Health)
	}
	if devs[0].Topology != nil {
		t.Errorf("replicas carry NUMA topology %v; kubelet's topology manager would then filter them", devs[0].Topology)
	}
}

// 8 GPUs × 100 replicas must fit in one ListAndWatch message; so must the
// worst case the inventory allows (16 GPUs, 95-character UUIDs, 100 each).
func TestListAndWatchUnderKubeletLimit(t *testing.T) {
	for _, tc := range []struct {
		name       string
		n, uuidLen int
	}{
		{"8 GPUs × 100, real UUIDs", 8, 40},
		{"16 GPUs × 100, 95-char UUIDs", 16, 95},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := &pluginapi.ListAndWatchResponse{Devices: Devices(gpus(tc.n, api.MaxShares, tc.uuidLen))}
			size := proto.Size(resp)
			t.Logf("%d devices, %d bytes (limit %d)", len(resp.Devices), size, kubeletMaxMessage)
			if size >= kubeletMaxMessage {
				t.Errorf("message is %d bytes, kubelet accepts at most %d", size, kubeletMaxMessage)
			}
		})
	}
}

func BenchmarkListAndWatchMessage(b *testing.B) {
	g := gpus(8, api.MaxShares, 40)
	b.ReportAllocs()
	for b.Loop() {
		resp := &pluginapi.ListAndWatchResponse{Devices: Devices(g)}
		if _, err := proto.Marshal(resp); err != nil {
			b.Fatal(err)
		}
	}
}
