package view

import (
	"bytes"
	"context"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/volcano-vgpu/volcano-vgpu/api"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

const (
	a100 = "NVIDIA A100-SXM4-80GB"
	t4   = "Tesla T4"
	g0   = "GPU-a0000000-0000-4000-8000-000000000000"
	g1   = "GPU-a0000000-0000-4000-8000-000000000001"
	g2   = "GPU-b0000000-0000-4000-8000-000000000000"
	g3   = "GPU-c0000000-0000-4000-8000-000000000000"
)

// fixture is a small cluster: a100-0 (2 GPUs, one shared by two pods, a
// node compute policy), a100-1 (one GPU unhealthy... and one free), t4-0
// whose inventory went stale, cpu-0 without an inventory; a pod pending for
// 999999 MiB that Volcano's own resource check refused.
func fixture(t *testing.T) *fake.Clientset {
	objs := []runtime.Object{
		node(t, "a100-0").gpu(g0, a100, 81920, 4).gpu(g1, a100, 81920, 4).annotate(api.ComputePolicyNodeKey, "balance").obj(),
		node(t, "a100-1").gpu(g2, a100, 81920, 4).gpu("GPU-b0000000-0000-4000-8000-000000000001", a100, 81920, 4).unhealthy(1).obj(),
		node(t, "t4-0").gpu(g3, t4, 15360, 2).heartbeat(t0.Add(-10 * time.Minute)).obj(),
		node(t, "cpu-0").obj(),
		pod(t, "team-a", "train").container("main", 2, 20480, 50).on("a100-0", "main", g0, 20480, 50).on("a100-0", "main", g1, 20480, 50).obj(),
		pod(t, "team-a", "infer").container("server", 1, 10240, 25).on("a100-0", "server", g0, 10240, 25).annotate(api.ComputePolicyKey, "fixed").obj(),
		pod(t, "team-a", "web").plain("nginx").obj(),
		// a manifest copied from train, annotation and all: books nothing
		pod(t, "team-a", "copy").container("main", 2, 20480, 50).on("a100-0", "main", g0, 20480, 50).uid("uid-other").phase(corev1.PodPending).obj(),
		pod(t, "team-a", "done").container("main", 1, 40960, 0).on("a100-1", "main", g2, 40960, 0).phase(corev1.PodSucceeded).obj(),
		pod(t, "team-b", "big").container("main", 1, 999999, 0).
			unschedulable("0/4 nodes are unavailable: 4 Insufficient volcano.sh/vgpu-memory.").obj(),
		pod(t, "team-b", "wide").container("main", 3, 8192, 10).obj(),
		pod(t, "team-b", "small").container("main", 1, 8192, 10).obj(),
		event("team-b", "big", "uid-big", "FailedScheduling", "volcano", "0/4 nodes are unavailable: 4 Insufficient volcano.sh/vgpu-memory.", t0),
		event("team-b", "other", "uid-other", "FailedScheduling", "volcano", "not about big", t0),
	}
	return fake.NewSimpleClientset(objs...)
}

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to write it)", err)
	}
	if d := cmp.Diff(string(want), string(got)); d != "" {
		t.Errorf("%s differs (-want +got; go test -update rewrites it):\n%s", path, d)
	}
}

func TestGolden(t *testing.T) {
	ctx := context.Background()
	client := fixture(t)
	o := DefaultOptions(t0)
	for _, tc := range []struct {
		name   string
		format string
		get    func() (any, error)
	}{
		{"nodes.txt", FormatTable, func() (any, error) { return Nodes(ctx, client, o) }},
		{"nodes.json", FormatJSON, func() (any, error) { return Nodes(ctx, client, o) }},
		{"pods-all.txt", FormatTable, func() (any, error) { return Pods(ctx, client, "", o) }},
		{"pods-team-b.yaml", FormatYAML, func() (any, error) { return Pods(ctx, client, "team-b", o) }},
		{"pods-none.txt", FormatTable, func() (any, error) { return Pods(ctx, client, "nobody", o) }},
		{"why-big.txt", FormatTable, func() (any, error) { return Why(ctx, client, "team-b", "big", o) }},
		{"why-big.json", FormatJSON, func() (any, error) { return Why(ctx, client, "team-b", "big", o) }},
		{"why-wide.txt", FormatTable, func() (any, error) { return Why(ctx, client, "team-b", "wide", o) }},
		{"why-small.txt", FormatTable, func() (any, error) { return Why(ctx, client, "team-b", "small", o) }},
		{"why-train.txt", FormatTable, func() (any, error) { return Why(ctx, client, "team-a", "train", o) }},
		{"why-web.txt", FormatTable, func() (any, error) { return Why(ctx, client, "team-a", "web", o) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, err := tc.get()
			if err != nil {
				t.Fatal(err)
			}
			var b bytes.Buffer
			if err := Write(&b, v, tc.format); err != nil {
				t.Fatal(err)
			}
			golden(t, tc.name, b.Bytes())
		})
	}
}

func TestWhyNearest(t *testing.T) {
	// The pod Volcano refused with "Insufficient volcano.sh/vgpu-memory"
	// still gets the GPU nearest to fitting: 81920 - 0 free on a100-1 GPU 0
	// beats a100-0 GPU 1 (81920 - 20480 = 61440 free).
	r, err := Why(context.Background(), fixture(t), "team-b", "big", DefaultOptions(t0))
	if err != nil {
		t.Fatal(err)
	}
	if r.Verdict != VerdictPending {
		t.Fatalf("verdict %q, want %q", r.Verdict, VerdictPending)
	}
	want := `a100-1 ` + g2 + ` (` + a100 + `): 81920 MiB free, container "main" asks 999999 MiB`
	if r.Nearest != want {
		t.Errorf("nearest:\n got %s\nwant %s", r.Nearest, want)
	}
	if len(r.Scheduler) != 2 || !strings.Contains(r.Scheduler[1], "Insufficient volcano.sh/vgpu-memory") {
		t.Errorf("scheduler messages %q: want the condition and big's one event", r.Scheduler)
	}
}

func TestNodesBookings(t *testing.T) {
	r, err := Nodes(context.Background(), fixture(t), DefaultOptions(t0))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]GPURow{}
	for _, g := range r.GPUs {
		got[g.UUID] = g
	}
	for _, tc := range []struct {
		name    string
		uuid    string
		memMiB  int64
		cores   int
		tenants int
		stale   bool
	}{
		{"shared GPU: train 20480 + infer 10240; the copied annotation books nothing", g0, 30720, 75, 2, false},
		{"train's second GPU", g1, 20480, 50, 1, false},
		{"a finished pod books nothing", g2, 0, 0, 0, false},
		{"an old heartbeat is stale", g3, 0, 0, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := got[tc.uuid]
			if g.AllocatedMemoryMiB != tc.memMiB || g.AllocatedCores != tc.cores || len(g.Tenants) != tc.tenants || g.Stale != tc.stale {
				t.Errorf("%s: %d MiB, %d%%, %d tenants, stale %v; want %d MiB, %d%%, %d tenants, stale %v",
					tc.uuid, g.AllocatedMemoryMiB, g.AllocatedCores, len(g.Tenants), g.Stale, tc.memMiB, tc.cores, tc.tenants, tc.stale)
			}
		})
	}
}

func TestCheckFormat(t *testing.T) {
	for _, f := range []string{"", "table", "json", "yaml"} {
		if err := CheckFormat(f); err != nil {
			t.Errorf("CheckFormat(%q): %v", f, err)
		}
	}
	if err := CheckFormat("wide"); err == nil || !strings.Contains(err.Error(), "json or yaml") {
		t.Errorf("CheckFormat(wide) = %v, want an error naming json and yaml", err)
	}
}
