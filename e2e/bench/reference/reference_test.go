package reference

import (
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/volcano-vgpu/volcano-vgpu/api"
	"github.com/volcano-vgpu/volcano-vgpu/e2e/bench/invtest"
	"github.com/volcano-vgpu/volcano-vgpu/e2e/bench/metrics"
	"github.com/volcano-vgpu/volcano-vgpu/e2e/bench/trace"
)

// inv builds a node inventory with every pair across NUMA nodes:
// inv("n", 8, 81920).NVSwitch(12).Obj().
func inv(node string, gpus int, mib int64) *invtest.Builder {
	return invtest.Node(node, gpus, mib).FlatPCIe(api.PCIeSystem)
}

func whole(gpus, pods int) trace.Job {
	k := trace.Whole
	if pods > 1 || gpus > 1 {
		k = trace.Gang
	}
	return trace.Job{Kind: k, Pods: pods, GPUs: gpus, Cores: 100}
}

func fraction(mib int64, cores int) trace.Job {
	return trace.Job{Kind: trace.Fraction, Pods: 1, GPUs: 1, MemoryMiB: mib, Cores: cores}
}

// placedNodes lists each pod's node in trace order of its job.
func placedNodes(jobs []trace.Job, pods []metrics.Pod) [][]string {
	out := make([][]string, len(jobs))
	for _, p := range pods {
		out[p.Job] = append(out[p.Job], p.Node)
	}
	return out
}

func TestPack(t *testing.T) {
	tests := []struct {
		name    string
		nodes   map[string]api.Inventory
		jobs    []trace.Job
		want    [][]string // per job, its pods' nodes ("" = not placed)
		wantAlg Algorithm
		wantMiB map[Algorithm]int64
	}{
		{
			// by name the whole GPU takes a-small (20000) and the fraction
			// b-big: 40000 MiB; largest GPUs first: 80000 + 20000
			name:    "largest GPUs first wins when whole GPUs count their memory",
			nodes:   map[string]api.Inventory{"a-small": inv("a-small", 1, 20000).Obj(), "b-big": inv("b-big", 1, 80000).Obj()},
			jobs:    []trace.Job{fraction(20000, 50), whole(1, 1)},
			want:    [][]string{{"a-small"}, {"b-big"}},
			wantAlg: FirstFitLargeGPUs,
			wantMiB: map[Algorithm]int64{FirstFit: 40000, FirstFitLargeGPUs: 100000, BestFit: 40000},
		},
		{
			// the gang of 2 pods × 2 GPUs needs both nodes; the 2-GPU whole
			// pod sorts after it (4 GPUs > 2) but the gang cannot fit once
			// anything else is there, so it goes first and takes all
			name:    "a gang is placed whole, before smaller jobs",
			nodes:   map[string]api.Inventory{"n0": inv("n0", 2, 1000).NVSwitch(2).Obj(), "n1": inv("n1", 2, 1000).NVSwitch(2).Obj()},
			jobs:    []trace.Job{whole(2, 1), whole(2, 2)},
			want:    [][]string{{""}, {"n0", "n1"}},
			wantAlg: FirstFit,
			wantMiB: map[Algorithm]int64{FirstFit: 4000, FirstFitLargeGPUs: 4000, BestFit: 4000},
		},
		{
			// 3 pods × 1 GPU on 2 GPUs: the gang fails and releases what it
			// held, so the fraction behind it still gets a GPU
			name:    "a gang that does not fit leaves nothing behind",
			nodes:   map[string]api.Inventory{"n0": inv("n0", 2, 1000).Obj()},
			jobs:    []trace.Job{whole(1, 3), fraction(500, 50)},
			want:    [][]string{{"", "", ""}, {"n0"}},
			wantAlg: FirstFit,
			wantMiB: map[Algorithm]int64{FirstFit: 500, FirstFitLargeGPUs: 500, BestFit: 500},
		},
		{
			// decreasing: 600, 500, 500. First fit: 600 → n0 (400 left),
			// 500 → n1, the last 500 fits nowhere: 1100 MiB. Best fit: 600 →
			// n1 (0 left beats 400), then both 500s on n0: 1600 MiB
			name:    "best fit wins when first fit strands room",
			nodes:   map[string]api.Inventory{"n0": inv("n0", 1, 1000).Obj(), "n1": inv("n1", 1, 600).Obj()},
			jobs:    []trace.Job{fraction(500, 10), fraction(500, 10), fraction(600, 10)},
			want:    [][]string{{"n0"}, {"n0"}, {"n1"}},
			wantAlg: BestFit,
			wantMiB: map[Algorithm]int64{FirstFit: 1100, FirstFitLargeGPUs: 1100, BestFit: 1600},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res, err := Pack(tc.jobs, tc.nodes)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, placedNodes(tc.jobs, res.Pods)); diff != "" {
				t.Errorf("nodes per job (-want +got):\n%s", diff)
			}
			if res.Algorithm != tc.wantAlg {
				t.Errorf("algorithm = %s, want %s", res.Algorithm, tc.wantAlg)
			}
			if diff := cmp.Diff(tc.wantMiB, res.MemoryMiB); diff != "" {
				t.Errorf("memory per algorithm (-want +got):\n%s", diff)
			}
		})
	}
}

// benchLike is a small cluster of the benchmark's three node kinds.
func benchLike() map[string]api.Inventory {
	nodes := map[string]api.Inventory{}
	for i := range 4 {
		nodes[fmt.Sprintf("a100-80g-%d", i)] = inv(fmt.Sprintf("a100-80g-%d", i), 8, 81920).NVSwitch(12).Obj()
		nodes[fmt.Sprintf("a100-40g-%d", i)] = inv(fmt.Sprintf("a100-40g-%d", i), 8, 40960).Obj()
		nodes[fmt.Sprintf("l4-%d", i)] = inv(fmt.Sprintf("l4-%d", i), 8, 23034).Obj()
	}
	return nodes
}

func TestPackOversubscribedNeverOverbooks(t *testing.T) {
	nodes := benchLike()
	c := trace.Capacity{GPUs: 96, MemoryMiB: 32 * (81920 + 40960 + 23034)}
	mix, err := trace.Scaled(3, c, 1.4)
	if err != nil {
		t.Fatal(err)
	}
	jobs, err := trace.Generate(3, mix)
	if err != nil {
		t.Fatal(err)
	}
	res, err := Pack(jobs, nodes)
	if err != nil {
		t.Fatal(err)
	}
	p := metrics.Pack(nodes, res.Pods)
	if p.OverBooked != 0 {
		t.Errorf("%d GPUs over-booked", p.OverBooked)
	}
	if p.MemoryMiB != res.MemoryMiB[res.Algorithm] {
		t.Errorf("metrics count %d MiB placed, the packer %d", p.MemoryMiB, res.MemoryMiB[res.Algorithm])
	}
	// 140% of demand: a good packing books at least 90% of the memory
	if share := float64(p.MemoryMiB) / float64(c.MemoryMiB); share < 0.9 {
		t.Errorf("placed %.0f%% of the GPU memory of an oversubscribed cluster, want ≥ 90%%", 100*share)
	}
	for _, pod := range res.Pods {
		if pod.Node == "" {
			continue
		}
		if len(pod.Containers) != 1 || len(pod.Containers[0]) != jobs[pod.Job].GPUs {
			t.Fatalf("pod of job %d: shares %v, want one container of %d GPUs", pod.Job, pod.Containers, jobs[pod.Job].GPUs)
		}
	}
	again, err := Pack(jobs, nodes)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(res, again); diff != "" {
		t.Errorf("two packings of the same trace differ (-first +second):\n%s", diff)
	}
}
