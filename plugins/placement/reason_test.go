package placement_test

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/volcano-vgpu/volcano-vgpu/plugins/placement"
	pt "github.com/volcano-vgpu/volcano-vgpu/plugins/placement/placementtest"
)

func messages(rs []placement.Reason) []string {
	var out []string
	for _, r := range rs {
		out = append(out, r.Error())
	}
	return out
}

func TestReasons(t *testing.T) {
	tests := []struct {
		name string
		node *placement.Node
		req  *placement.Request
		want []string
	}{
		{name: "memory per GPU and the largest free", // 81920-75776 = 6144 free, 81920-79872 = 2048 free
			node: pt.Node("n1").GPUs(2, "A100-80GB", mib).Use(0, 75776, 10).Use(1, 79872, 10).Obj(),
			req:  pt.Req().GPUs(1, 8192, 10).Obj(),
			want: []string{
				"GPU-n1-0 (A100-80GB): 6144 MiB free, container \"c0\" asks 8192 MiB",
				"GPU-n1-1 (A100-80GB): 2048 MiB free, container \"c0\" asks 8192 MiB",
				"container \"c0\": no GPU with 8192 MiB free (largest free 6144 MiB on GPU-n1-0)",
			}},
		{name: "memory percentage", // 50% of 81920 = 40960
			node: pt.Node("n1").GPUs(1, "A100-80GB", mib).Use(0, 61440, 10).Obj(),
			req:  pt.Req().Percent(1, 50, 10).Obj(),
			want: []string{
				"GPU-n1-0 (A100-80GB): 20480 MiB free, container \"c0\" asks 50% = 40960 MiB",
				"container \"c0\": no GPU with 50% of its memory free (largest free 20480 MiB on GPU-n1-0)",
			}},
		{name: "cores", // 100-70 = 30 free
			node: pt.Node("n1").GPUs(1, "A100-80GB", mib).Use(0, 1024, 70).Obj(),
			req:  pt.Req().GPUs(1, 1024, 40).Obj(),
			want: []string{
				"GPU-n1-0 (A100-80GB): 30% cores free, container \"c0\" asks 40%",
				"container \"c0\": no GPU with 40% cores free (most free 30% on GPU-n1-0)",
			}},
		{name: "too few healthy GPUs",
			node: pt.Node("n1").GPUs(4, "A100-80GB", mib).Unhealthy(2, 3).Obj(),
			req:  pt.Req().GPUs(4, 1024, 10).Obj(),
			want: []string{
				"GPU-n1-2 (A100-80GB): unhealthy",
				"GPU-n1-3 (A100-80GB): unhealthy",
				"container \"c0\": needs 4 GPUs, 2 healthy",
			}},
		{name: "some GPUs fit, not enough", // GPU1 held, GPU2 full of tenants
			node: pt.Node("n1").GPUs(3, "A100-80GB", mib).MaxShares(1).Exclusive(1).Use(2, 1024, 10).Obj(),
			req:  pt.Req().GPUs(2, 1024, 10).Obj(),
			want: []string{
				"GPU-n1-1 (A100-80GB): held exclusively by another task",
				"GPU-n1-2 (A100-80GB): 1/1 tenants, no room for another",
				"container \"c0\": needs 2 GPUs, 1 have room",
				"container \"c0\": GPUs held exclusively by other tasks (1)",
				"container \"c0\": GPUs at their tenant limit (1)",
			}},
		{name: "exclusive ask on shared GPUs",
			node: pt.Node("n1").GPUs(1, "A100-80GB", mib).Use(0, 1024, 10).Obj(),
			req:  pt.Req().GPUs(1, 1024, 100).Obj(),
			want: []string{
				"GPU-n1-0 (A100-80GB): shared by 1 task, an exclusive (100-core) task needs an idle GPU",
				"container \"c0\": no GPU idle for an exclusive (100-core) task (1)",
			}},
		{name: "filters",
			node: pt.Node("n1").GPU("GPU-a", "Tesla T4", 15360).GPU("GPU-b", "A100-80GB", mib).Obj(),
			req:  pt.Req().GPUs(1, 1024, 10).TypeExclude("t4").UUIDExclude("GPU-b").Obj(),
			want: []string{
				"GPU-a (Tesla T4): model excluded by the type filter",
				"GPU-b (A100-80GB): excluded by the UUID filter",
				"container \"c0\": needs 1 GPU, 0 match the type/UUID filters (type not in t4; UUID not in GPU-b)",
			}},
		{name: "matching GPUs unhealthy", // 2 A100s match, 1 healthy; the T4s are healthy but filtered out
			node: pt.Node("n1").GPU("GPU-a", "A100-80GB", mib).GPU("GPU-b", "A100-80GB", mib).GPU("GPU-c", "Tesla T4", 15360).GPU("GPU-d", "Tesla T4", 15360).Unhealthy(1).Obj(),
			req:  pt.Req().GPUs(2, 1024, 10).TypeInclude("A100").Obj(),
			want: []string{
				"GPU-b (A100-80GB): unhealthy",
				"GPU-c (Tesla T4): model excluded by the type filter",
				"GPU-d (Tesla T4): model excluded by the type filter",
				`container "c0": needs 2 GPUs, 2 match the type/UUID filters but 1 of them healthy`,
			}},
		{name: "required topology",
			node: pt.Node("n1").GPUs(2, "A100-80GB", mib).Obj(),
			req:  pt.Req().GPUs(2, 1024, 10).Topology(placement.TopologyRequired).Obj(),
			want: []string{"container \"c0\": no NVLink-connected set of 2 GPUs with room"}},
		{name: "stale", node: pt.Node("n1").GPUs(1, "A100-80GB", mib).Stale().Obj(),
			req: pt.Req().GPUs(1, 1024, 10).Obj(), want: []string{"inventory stale"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, reasons := placement.Fit(tt.req, tt.node, nil)
			if diff := cmp.Diff(tt.want, messages(reasons)); diff != "" {
				t.Errorf("reasons (-want +got):\n%s", diff)
			}
		})
	}
}

func TestReasonErrors(t *testing.T) {
	_, reasons := placement.Fit(pt.Req().GPUs(1, 8192, 10).Obj(), pt.Node("n1").GPUs(1, "A100", 4096).Obj(), nil)
	for _, r := range reasons {
		if !errors.Is(r, placement.ErrMemory) {
			t.Errorf("%v: errors.Is(ErrMemory) = false", r)
		}
	}
	if len(reasons) != 2 {
		t.Fatalf("got %d reasons, want a GPU and a node reason: %v", len(reasons), reasons)
	}
	if got, want := reasons[1].Short(), `container "c0": no GPU with 8192 MiB free`; got != want {
		t.Errorf("Short() = %q, want %q", got, want)
	}
}

func TestClosest(t *testing.T) {
	req := pt.Req().GPUs(1, 8192, 10).Obj()
	tests := []struct {
		name  string
		nodes []*placement.Node
		want  string
	}{
		{name: "most free memory across nodes", nodes: []*placement.Node{
			pt.Node("a").GPUs(2, "A100", mib).Use(0, 79872, 10).Use(1, 79872, 10).Obj(), // 2048 free
			pt.Node("b").GPUs(2, "A100", mib).Use(0, 77824, 10).Use(1, 75776, 10).Obj(), // 4096, 6144 free
			pt.Node("c").GPUs(1, "A100", mib).Stale().Obj(),
		}, want: `b GPU-b-1 (A100): 6144 MiB free, container "c0" asks 8192 MiB`},
		{name: "cores nearer than memory", nodes: []*placement.Node{
			pt.Node("a").GPUs(1, "A100", mib).Use(0, 79872, 10).Obj(), // 2048 of 8192 MiB: 25%
			pt.Node("b").GPUs(1, "A100", mib).Use(0, 1024, 95).Obj(),  // 5 of 10 cores: 50%
		}, want: `b GPU-b-0 (A100): 5% cores free, container "c0" asks 10%`},
		{name: "nothing close", nodes: []*placement.Node{
			pt.Node("a").GPUs(1, "A100", mib).Stale().Obj(),
			pt.Node("b").GPUs(1, "A100", mib).Unhealthy(0).Obj(),
		}, want: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var c placement.Closest
			for _, n := range tt.nodes {
				_, reasons := placement.Fit(req, n, nil)
				c.Add(n.Name, reasons)
			}
			if got := c.String(); got != tt.want {
				t.Errorf("Closest:\n got %q\nwant %q", got, tt.want)
			}
		})
	}
}

func TestShortIsTheSameOnEveryNode(t *testing.T) {
	req := pt.Req().GPUs(4, 1024, 10).TypeInclude("A100").Obj()
	var shorts []string
	for _, node := range []*placement.Node{
		pt.Node("a").GPUs(4, "A100", mib).Unhealthy(0, 1, 2).Obj(), // 1 healthy
		pt.Node("b").GPUs(4, "A100", mib).Unhealthy(0).Obj(),       // 3 healthy
	} {
		_, reasons := placement.Fit(req, node, nil)
		shorts = append(shorts, reasons[len(reasons)-1].Short())
	}
	want := `container "c0": needs 4 healthy GPUs matching the type/UUID filters, has fewer`
	if shorts[0] != want || shorts[1] != want {
		t.Errorf("Short = %q, want %q on both nodes", shorts, want)
	}
}
