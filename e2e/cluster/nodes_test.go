package cluster

import (
	"context"
	"sort"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/volcano-vgpu/volcano-vgpu/e2e/sim/simconfig"
)

func TestEnsureNodesCreatesMissingAndDeletesOtherFilesNodes(t *testing.T) {
	simNode := func(name string) simconfig.Node {
		return simconfig.Node{Name: name, CPU: "8", Memory: "16Gi", Pods: 110, GPUs: []simconfig.GPU{{Model: "NVIDIA L4"}}}
	}
	tests := []struct {
		name     string
		existing []*corev1.Node
		file     []simconfig.Node
		want     []string
	}{{
		name: "fresh cluster: every node of the file",
		file: []simconfig.Node{simNode("a-0"), simNode("a-1")},
		want: []string{"a-0", "a-1"},
	}, {
		name: "reused after a larger file: its other simulated nodes go, a node that is not ours stays",
		existing: []*corev1.Node{NodeObject(simNode("a-0")), NodeObject(simNode("a-1")), NodeObject(simNode("a-2")),
			{ObjectMeta: metav1.ObjectMeta{Name: "real-node"}}},
		file: []simconfig.Node{simNode("a-0"), simNode("a-1")},
		want: []string{"a-0", "a-1", "real-node"},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			client := fake.NewClientset()
			for _, n := range tc.existing {
				if _, err := client.CoreV1().Nodes().Create(context.Background(), n, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			cl := &Cluster{Client: client, Nodes: tc.file}
			if err := cl.ensureNodes(context.Background()); err != nil {
				t.Fatal(err)
			}
			l, err := client.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, n := range l.Items {
				got = append(got, n.Name)
			}
			sort.Strings(got)
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("nodes (-want +got):\n%s", d)
			}
		})
	}
}
