package plugin

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/volcano-vgpu/volcano-vgpu/api"
)

func TestEncodeLimiterRoundTrip(t *testing.T) {
	in := LimiterInput{
		PodUID: "3f1c0000-0000-0000-0000-000000000001", Namespace: "ns", Name: "p1", Container: "main",
		Policy: api.ComputeBalance, SharedDir: "/var/run/vcuda",
		Devices: []api.DeviceShare{
			{UUID: "GPU-5a7c0f2e-1d2b-4c3a-9e8f-0123456789ab", MemoryMiB: 4096, Cores: 25},
			{UUID: "GPU-5a7c0f2e-1d2b-4c3a-9e8f-0123456789ac", MemoryMiB: 1024, Cores: 0}, // no share asked: no limit
		},
	}
	b, err := EncodeLimiter(in)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) != api.LimiterConfigSize {
		t.Fatalf("config is %d bytes, want %d", len(b), api.LimiterConfigSize)
	}
	got, err := api.DecodeLimiterConfig(b)
	if err != nil {
		t.Fatal(err)
	}
	want := &api.LimiterConfig{
		Policy: api.ComputeBalance, PodUID: in.PodUID, PodNamespace: "ns", PodName: "p1", ContainerName: "main", SharedDir: "/var/run/vcuda",
		Devices: []api.LimiterDevice{
			{UUID: in.Devices[0].UUID, MemoryLimitBytes: 4096 << 20, CorePercent: 25},
			{UUID: in.Devices[1].UUID, MemoryLimitBytes: 1024 << 20, CorePercent: 100},
		},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("decoded (-want +got):\n%s", d)
	}
}

// The simulated UUIDs must satisfy the limiter's UUID format.
func TestEncodeLimiterAcceptsSimulatedUUIDs(t *testing.T) {
	n := simNode(t, testNode)
	_, err := EncodeLimiter(LimiterInput{PodUID: "uid", Namespace: "ns", Name: "p", Container: "c", Policy: api.ComputeFixed, SharedDir: "/var/run/vcuda",
		Devices: []api.DeviceShare{{UUID: n.GPUs[0].UUID, MemoryMiB: 1, Cores: 1}}})
	if err != nil {
		t.Fatal(err)
	}
}

func TestEncodeLimiterContextMiB(t *testing.T) {
	uuid := "GPU-5a7c0f2e-1d2b-4c3a-9e8f-0123456789ab"
	in := func(mib int64, ctx uint32) LimiterInput {
		return LimiterInput{PodUID: "uid", Namespace: "ns", Name: "p", Container: "c", Policy: api.ComputeFixed, SharedDir: "/var/run/vcuda",
			Devices: []api.DeviceShare{{UUID: uuid, MemoryMiB: mib, Cores: 30}}, ContextMiB: map[string]uint32{uuid: ctx}}
	}
	tests := []struct {
		name    string
		in      LimiterInput
		want    uint32
		wantErr string
	}{
		{name: "context counted in the cap", in: in(8192, 520), want: 520},
		{name: "not counted", in: in(8192, 0), want: 0},
		{name: "context as large as the ask", in: in(512, 512), wantErr: "a CUDA context takes 512 MiB on this GPU model (limiter.contextMiB) and the container asks 512 MiB"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := EncodeLimiter(tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			c, err := api.DecodeLimiterConfig(b)
			if err != nil {
				t.Fatal(err)
			}
			if got := c.Devices[0].ContextMiB; got != tt.want {
				t.Errorf("context_mib = %d, want %d", got, tt.want)
			}
		})
	}
}

// On an MPS GPU the SM partition bounds compute: no launch throttle, the MPS
// percentage instead, the memory cap as before.
func TestEncodeLimiterMPS(t *testing.T) {
	in := LimiterInput{
		PodUID: "3f1c0000-0000-0000-0000-000000000001", Namespace: "ns", Name: "p1", Container: "main",
		Policy: api.ComputeFixed, SharedDir: "/var/run/vcuda", MPSThreadPercent: 30,
		Devices: []api.DeviceShare{{UUID: "GPU-5a7c0f2e-1d2b-4c3a-9e8f-0123456789ab", MemoryMiB: 4096, Cores: 30}},
	}
	b, err := EncodeLimiter(in)
	if err != nil {
		t.Fatal(err)
	}
	got, err := api.DecodeLimiterConfig(b)
	if err != nil {
		t.Fatal(err)
	}
	want := &api.LimiterConfig{
		Policy: api.ComputeNone, PodUID: in.PodUID, PodNamespace: "ns", PodName: "p1", ContainerName: "main", SharedDir: "/var/run/vcuda",
		MPSThreadPercent: 30,
		Devices:          []api.LimiterDevice{{UUID: in.Devices[0].UUID, MemoryLimitBytes: 4096 << 20, CorePercent: 100}},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("decoded (-want +got):\n%s", d)
	}
}
