package match

import (
	"fmt"
	"testing"
)

// node100 is a node with 8 GPUs and n single-GPU pods, pod i on GPU i%8;
// the first half are already allocated.
func node100(n int) (map[string]*Pod, *Ledger, *Pod) {
	gpus := "ABCDEFGH"
	pods, l := map[string]*Pod{}, NewLedger()
	var target *Pod
	for i := range n {
		p := pod(fmt.Sprintf("p%03d", i)).app("main", string(gpus[i%8])).obj()
		pods[p.UID] = p
		if i < n/2 {
			l.Record(Candidate{Pod: p, Index: 0}, []string{id(string(gpus[i%8]), i/8)})
		} else if target == nil {
			target = p
		}
	}
	return pods, l, target
}

// BenchmarkForAllocate100Pods: 100 pods on the node, 50 pending, 7 of them on
// the requested GPU, narrowed through the pods kubelet lists.
func BenchmarkForAllocate100Pods(b *testing.B) {
	for _, n := range []int{100, 110} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			pods, l, target := node100(n)
			known := knownOnly(target.Name)
			ids := []string{"GPU-" + target.Containers[0].Devices[0].UUID[4:] + "::9"}
			b.ReportAllocs()
			for b.Loop() {
				r, err := ParseRequest(ids, pods, l)
				if err != nil {
					b.Fatal(err)
				}
				c, err := ForAllocate(r, pods, l, known)
				if err != nil || c.Pod != target {
					b.Fatalf("matched %v, %v", c, err)
				}
			}
		})
	}
}

func BenchmarkPreferred100Pods(b *testing.B) {
	pods, l, target := node100(100)
	req := PreferredRequest{Available: all("ABCDEFGH", 10), Size: 1}
	known := knownOnly(target.Name)
	b.ReportAllocs()
	for b.Loop() {
		if got := Preferred(req, pods, l, known); len(got) != 1 {
			b.Fatalf("got %v", got)
		}
	}
}
