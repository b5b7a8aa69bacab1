package simconfig

import (
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
)

func repoFile(t *testing.T, rel string) string {
	_, here, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(here), "..", "..", "..", rel)
}

func TestShippedFiles(t *testing.T) {
	tests := []struct {
		file      string
		nodes     int
		firstGPUs int
	}{
		{"e2e/sim/clusters/local.yaml", 6, 8},
		{"e2e/sim/clusters/bench.yaml", 200, 8},
		{"e2e/sim/clusters/bench-1000.yaml", 1000, 8},
		{"e2e/sim/clusters/bench-2000.yaml", 2000, 8},
		{"e2e/sim/clusters/bench-5000.yaml", 5000, 8},
	}
	for _, tc := range tests {
		t.Run(tc.file, func(t *testing.T) {
			f, err := Load(repoFile(t, tc.file))
			if err != nil {
				t.Fatal(err)
			}
			nodes := f.Nodes()
			if len(nodes) != tc.nodes || len(nodes[0].GPUs) != tc.firstGPUs {
				t.Fatalf("got %d nodes, first with %d GPUs; want %d and %d", len(nodes), len(nodes[0].GPUs), tc.nodes, tc.firstGPUs)
			}
			seen := map[string]bool{}
			for _, n := range nodes {
				for _, g := range n.GPUs {
					if seen[g.UUID] {
						t.Fatalf("UUID %s appears twice", g.UUID)
					}
					seen[g.UUID] = true
				}
			}
		})
	}
}

func TestTopology(t *testing.T) {
	f, err := Load(repoFile(t, "e2e/sim/clusters/local.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		node string
		i, j int
		want int
	}{
		{"a100-80g-0", 0, 7, 12}, // NVSwitch: every pair
		{"a100-40g-0", 2, 3, 4},  // pair (2,3)
		{"a100-40g-0", 1, 2, 0},  // different pairs
		{"l4-1", 0, 1, 0},        // PCIe only
		{"a100-80g-0", 3, 3, 0},  // no link to itself
	}
	for _, tc := range tests {
		n, ok := f.Find(tc.node)
		if !ok {
			t.Fatalf("node %s not found", tc.node)
		}
		if got := n.NVLinkCount(tc.i, tc.j); got != tc.want {
			t.Errorf("%s NVLinkCount(%d,%d) = %d, want %d", tc.node, tc.i, tc.j, got, tc.want)
		}
	}
}

func TestUUIDsStable(t *testing.T) {
	if a, b := uuidFor("n1", 0), uuidFor("n1", 0); a != b || !strings.HasPrefix(a, "GPU-") {
		t.Fatalf("uuidFor not stable: %s %s", a, b)
	}
	if uuidFor("n1", 0) == uuidFor("n1", 1) {
		t.Fatal("uuidFor collides across indexes")
	}
}

func TestParseErrors(t *testing.T) {
	base := "version: v1\nnodes:\n- {namePrefix: x, count: 1, cpu: '1', memory: 1Gi, pods: 10, gpuModel: L4, gpus: 2, gpuMemoryMiB: 100, topology: pcie, maxShares: 4"
	tests := []struct{ name, doc, want string }{
		{"unknown key", base + ", colour: red}", `unknown field "colour"`},
		{"bad version", strings.Replace(base, "v1", "v2", 1) + "}", `version: expected "v1"`},
		{"bad topology", strings.Replace(base, "pcie", "mesh", 1) + "}", "nodes[0].topology: expected nvswitch, pairs or pcie"},
		{"numa length", base + ", numa: [0]}", "nodes[0].numa: expected one NUMA node per GPU (2), got 1"},
		{"nvlink without count", strings.Replace(base, "pcie", "pairs", 1) + "}", "nodes[0].nvlinksPerPair"},
		{"reserve as large as the GPU", base + ", gpuReservedMiB: 100}", "nodes[0].gpuReservedMiB: expected 0 or more MiB, less than gpuMemoryMiB (100), got 100"},
		{"MIG on a model without a MIG table", base + ", migGPUs: [0]}", `nodes[0].migGPUs: expected a model with a MIG table (NVIDIA A100 80GB PCIe, NVIDIA A100-PCIE-40GB, `},
		{"MIG GPU past the last", strings.Replace(base, "L4", "NVIDIA A100-SXM4-40GB", 1) + ", migGPUs: [2]}", "nodes[0].migGPUs: expected GPU indexes from 0 to 1, got 2"},
		{"MIG GPU twice", strings.Replace(base, "L4", "NVIDIA A100-SXM4-40GB", 1) + ", migGPUs: [1, 1]}", "nodes[0].migGPUs: expected each GPU once, got 1 twice"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.doc))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Parse error = %v, want %q", err, tc.want)
			}
		})
	}
}

func TestMIGGPUs(t *testing.T) {
	doc := "version: v1\nnodes:\n- {namePrefix: x, count: 1, cpu: '1', memory: 1Gi, pods: 10, gpuModel: NVIDIA A100-SXM4-40GB, gpus: 3, gpuMemoryMiB: 40960, topology: pcie, maxShares: 4, migGPUs: [2, 0]}"
	f, err := Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	var got []bool
	for _, g := range f.Nodes()[0].GPUs {
		got = append(got, g.MIG)
	}
	if want := []bool{true, false, true}; !slices.Equal(got, want) {
		t.Errorf("MIG per GPU = %v, want %v", got, want)
	}
}

func TestWithMIG(t *testing.T) {
	doc := "version: v1\nnodes:\n- {namePrefix: x, count: 1, cpu: '1', memory: 1Gi, pods: 10, gpuModel: NVIDIA A100-SXM4-40GB, gpus: 3, gpuMemoryMiB: 40960, topology: pcie, maxShares: 4}\n" +
		"- {namePrefix: l, count: 1, cpu: '1', memory: 1Gi, pods: 10, gpuModel: L4, gpus: 1, gpuMemoryMiB: 23034, topology: pcie, maxShares: 4}"
	f, err := Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	x, l := f.Nodes()[0], f.Nodes()[1]
	on, err := x.WithMIG("--mig-gpus", []int{1})
	if err != nil {
		t.Fatal(err)
	}
	var got []bool
	for _, g := range on.GPUs {
		got = append(got, g.MIG)
	}
	if want := []bool{false, true, false}; !slices.Equal(got, want) {
		t.Errorf("MIG per GPU = %v, want %v", got, want)
	}
	if x.GPUs[1].MIG {
		t.Error("WithMIG changed the node it was given")
	}
	for _, tc := range []struct {
		name string
		node Node
		gpus []int
		want string
	}{
		{"past the last GPU", x, []int{3}, "--mig-gpus: expected GPU indexes of node x-0 from 0 to 2, got 3"},
		{"a model without MIG", l, []int{0}, "--mig-gpus: GPU 0 of node l-0 is a L4; expected a model with a MIG table"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := tc.node.WithMIG("--mig-gpus", tc.gpus); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("WithMIG = %v, want %q", err, tc.want)
			}
		})
	}
}
