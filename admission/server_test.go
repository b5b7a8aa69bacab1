package admission

import (
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// A node republishing a different inventory (a GPU swapped, a new model) is
// read again; an undecodable one counts for nothing.
func TestSmallestGPUFollowsInventoryChanges(t *testing.T) {
	nodes := []*corev1.Node{gpuNode(t, "a", "NVIDIA A100-SXM4-80GB", 2, 81920)}
	smallest := SmallestGPU(func() ([]*corev1.Node, error) { return nodes, nil })
	for _, step := range []struct {
		name    string
		node    *corev1.Node
		wantMiB int64
		wantOK  bool
	}{
		{"first inventory", nodes[0], 81920, true},
		{"same node, smaller GPUs now", gpuNode(t, "a", "NVIDIA L4", 2, 23034), 23034, true},
		{"same node, inventory unreadable", func() *corev1.Node {
			n := gpuNode(t, "a", "NVIDIA L4", 2, 23034)
			for k := range n.Annotations {
				n.Annotations[k] = "{"
			}
			return n
		}(), 0, false},
	} {
		nodes[0] = step.node
		if mib, ok := smallest(nil, nil); mib != step.wantMiB || ok != step.wantOK {
			t.Errorf("%s: smallest = %d, %t; want %d, %t", step.name, mib, ok, step.wantMiB, step.wantOK)
		}
	}
}

// BenchmarkSmallestGPU: one whole-GPU pod's lookup over 1000 nodes × 8 GPUs
// whose inventories did not change since the last pod.
func BenchmarkSmallestGPU(b *testing.B) {
	t := &testing.T{}
	nodes := make([]*corev1.Node, 1000)
	for i := range nodes {
		nodes[i] = gpuNode(t, fmt.Sprintf("n%04d", i), "NVIDIA A100-SXM4-80GB", 8, 81920)
	}
	smallest := SmallestGPU(func() ([]*corev1.Node, error) { return nodes, nil })
	smallest(nil, nil)
	b.ReportAllocs()
	for b.Loop() {
		if _, ok := smallest([]string{"a100"}, nil); !ok {
			b.Fatal("no GPU")
		}
	}
}
