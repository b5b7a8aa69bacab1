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
				"GPU-n1-0 (A100-80GB): 6144 MiB free, task asks 8192 MiB",
				"GPU-n1-1 (A100-80GB): 2048 MiB free, task asks 8192 MiB",
				"no GPU with 8192 MiB free (largest free 6144 MiB on GPU-n1-0)",
			}},
		{name: "memory percentage", // 50% of 81920 = 40960
			node: pt.Node("n1").GPUs(1, "A100-80GB", mib).Use(0, 61440, 10).Obj(),
			req:  pt.Req().Percent(1, 50, 10).Obj(),
			want: []string{
				"GPU-n1-0 (A100-80GB): 20480 MiB free, task asks 50% = 40960 MiB",
				"no GPU with 50% of its memory free (largest free 20480 MiB on GPU-n1-0)",
			}},
		{name: "cores", // 100-70 = 30 free
			node: pt.Node("n1").GPUs(1, "A100-80GB", mib).Use(0, 1024, 70).Obj(),
			req:  pt.Req().GPUs(1, 1024, 40).Obj(),
			want: []string{
				"GPU-n1-0 (A100-80GB): 30% cores free, task asks 40%",
				"no GPU with 40% cores free (most free 30% on GPU-n1-0)",
			}},
		{name: "too few healthy GPUs",
			node: pt.Node("n1").GPUs(4, "A100-80GB", mib).Unhealthy(2, 3).Obj(),
			req:  pt.Req().GPUs(4, 1024, 10).Obj(),
			want: []string{
				"GPU-n1-2 (A100-80GB): unhealthy",
				"GPU-n1-3 (A100-80GB): unhealthy",
				"needs 4 GPUs, 2 healthy",
			}},
		{name: "some GPUs fit, not enough", // GPU1 held, GPU2 full of tenants
			node: pt.Node("n1").GPUs(3, "A100-80GB", mib).MaxShares(1).Exclusive(1).Use(2, 1024, 10).Obj(),
			req:  pt.Req().GPUs(2, 1024, 10).Obj(),
			want: []string{
				"GPU-n1-1 (A100-80GB): held exclusively by another task",
				"GPU-n1-2 (A100-80GB): 1/1 tenants, no room for another",
				"needs 2 GPUs, 1 have room",
				"GPUs held exclusively by other tasks (1)",
				"GPUs at their tenant limit (1)",
			}},
		{name: "exclusive ask on shared GPUs",
			node: pt.Node("n1").GPUs(1, "A100-80GB", mib).Use(0, 1024, 10).Obj(),
			req:  pt.Req().GPUs(1, 1024, 100).Obj(),
			want: []string{
				"GPU-n1-0 (A100-80GB): shared by 1 task, an exclusive (100-core) task needs an idle GPU",
				"no GPU idle for an exclusive (100-core) task (1)",
			}},
		{name: "filters",
			node: pt.Node("n1").GPU("GPU-a", "Tesla T4", 15360).GPU("GPU-b", "A100-80GB", mib).Obj(),
			req:  pt.Req().GPUs(1, 1024, 10).TypeExclude("t4").UUIDExclude("GPU-b").Obj(),
			want: []string{
				"GPU-a (Tesla T4): model excluded by the type filter",
				"GPU-b (A100-80GB): excluded by the UUID filter",
				"needs 1 GPU, 0 match the type/UUID filters",
			}},
		{name: "required topology",
			node: pt.Node("n1").GPUs(2, "A100-80GB", mib).Obj(),
			req:  pt.Req().GPUs(2, 1024, 10).Topology(placement.TopologyRequired).Obj(),
			want: []string{"no NVLink-connected set of 2 GPUs with room"}},
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
	if got, want := reasons[1].Short(), "no GPU with 8192 MiB free"; got != want {
		t.Errorf("Short() = %q, want %q", got, want)
	}
}

func TestAggregator(t *testing.T) {
	req := pt.Req().GPUs(1, 8192, 10).Obj()
	req4 := pt.Req().GPUs(4, 8192, 10).Obj()
	var agg placement.Aggregator
	for _, n := range []struct {
		req  *placement.Request
		node *placement.Node
	}{
		{req, pt.Node("a").GPUs(2, "A100", mib).Use(0, 75776, 10).Use(1, 79872, 10).Obj()}, // largest free 6144
		{req, pt.Node("b").GPUs(1, "A100", mib).Use(0, 77824, 10).Obj()},                   // 4096 free
		{req, pt.Node("c").GPUs(1, "A100", mib).Use(0, 81920, 10).Obj()},                   // 0 free
		{req, pt.Node("d").GPUs(1, "A100", mib).Stale().Obj()},
		{req, pt.Node("e").GPUs(1, "A100", mib).Stale().Obj()},
		{req4, pt.Node("f").GPUs(4, "A100", mib).Unhealthy(0, 1).Obj()},
	} {
		_, reasons := placement.Fit(n.req, n.node, nil)
		agg.Add(n.node.Name, reasons)
	}
	want := "3 nodes: no GPU with 8192 MiB free (largest free 6144 MiB on GPU-a-0); 2 nodes: inventory stale; 1 node: needs 4 GPUs, 2 healthy"
	if got := agg.String(); got != want {
		t.Errorf("Aggregator:\n got %q\nwant %q", got, want)
	}
	if agg.Nodes() != 6 {
		t.Errorf("Nodes() = %d, want 6", agg.Nodes())
	}
}

func TestAggregatorAtMost(t *testing.T) {
	req := pt.Req().GPUs(4, 1024, 10).Obj()
	var agg placement.Aggregator
	for _, node := range []*placement.Node{
		pt.Node("a").GPUs(4, "A100", mib).Unhealthy(0, 1, 2).Obj(), // 1 healthy
		pt.Node("b").GPUs(4, "A100", mib).Unhealthy(0).Obj(),       // 3 healthy
	} {
		_, reasons := placement.Fit(req, node, nil)
		agg.Add(node.Name, reasons)
	}
	if got, want := agg.String(), "2 nodes: needs 4 GPUs, at most 3 healthy"; got != want {
		t.Errorf("Aggregator = %q, want %q", got, want)
	}
}
