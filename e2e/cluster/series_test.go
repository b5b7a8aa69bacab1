package cluster

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/google/go-cmp/cmp"
)

const page = `# HELP volcano_vgpu_gpu_shares Shares.
volcano_vgpu_gpu_shares{gpu_index="0",gpu_uuid="GPU-a",model="L4"} 2
volcano_vgpu_container_memory_used_bytes{container="main",namespace="ns",pod="p-1"} 1024
volcano_vgpu_container_memory_used_bytes{container="side",namespace="ns",pod="p-10"} 2048
volcano_vgpu_build_info 1
go_goroutines{x="y"} 7
`

func TestSamplesAndPodSeries(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, page) }))
	defer srv.Close()
	ctx := context.Background()
	samples, err := Samples(ctx, srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	if len(samples) != 3 {
		t.Fatalf("%d samples, want the 3 labelled volcano_vgpu ones: %v", len(samples), samples)
	}
	labels := []struct {
		name     string
		s        Sample
		key, val string
	}{
		{name: "first label", s: samples[0], key: "gpu_index", val: "0"},
		{name: "middle label", s: samples[0], key: "gpu_uuid", val: "GPU-a"},
		{name: "a key that ends another's name is not it", s: samples[0], key: "uuid", val: ""},
		{name: "absent", s: samples[1], key: "gpu_uuid", val: ""},
	}
	for _, tc := range labels {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.s.Label(tc.key); got != tc.val {
				t.Errorf("Label(%q) = %q, want %q", tc.key, got, tc.val)
			}
		})
	}
	got, err := PodSeries(ctx, srv.URL, "p-1", "")
	if err != nil {
		t.Fatal(err)
	}
	// p-10 is another pod, though its name starts with p-1
	if diff := cmp.Diff(map[string]float64{"volcano_vgpu_container_memory_used_bytes": 1024}, got); diff != "" {
		t.Errorf("PodSeries p-1 (-want +got):\n%s", diff)
	}
	if got, _ := PodSeries(ctx, srv.URL, "p-10", "main"); len(got) != 0 {
		t.Errorf("PodSeries p-10 container main = %v, want none (its container is side)", got)
	}
}
