package placement

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"sort"
	"testing"
)

// randomNode draws a node of n GPUs with random links and usage.
func randomNode(r *rand.Rand, n int) *Node {
	node := &Node{Name: "r", Links: NewLinks(n)}
	nvChoices := []int{0, 0, 0, 1, 2, 4, 12}
	for i := 0; i < n; i++ {
		g := GPU{Index: i, UUID: fmt.Sprintf("GPU-%d", i), Model: "A100", MemoryMiB: 81920, Healthy: r.IntN(10) > 0, NUMA: i * 2 / n, MaxShares: 4}
		for k := r.IntN(3); k > 0; k-- {
			g.UsedMemoryMiB += int64(r.IntN(30000))
			g.UsedCores += r.IntN(40)
			g.Shares++
		}
		node.GPUs = append(node.GPUs, g)
		for j := 0; j < i; j++ {
			node.Links.Set(i, j, Link{NVLinks: nvChoices[r.IntN(len(nvChoices))], PCIe: PCIeLevel(1 + r.IntN(6))})
		}
	}
	return node
}

// TestSearchMatchesExhaustive checks that pruning never changes the result:
// the branch and bound must return the set an unpruned enumeration finds.
func TestSearchMatchesExhaustive(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var pruned, full Fitter
	full.s.exhaustive = true
	modes := []TopologyMode{TopologyPrefer, TopologyRequired, TopologyNone}
	for iter := 0; iter < 3000; iter++ {
		n := 2 + r.IntN(11)
		node := randomNode(r, n)
		req := &Request{
			Containers:   []Container{{Name: "c", Number: 1 + r.IntN(n), MemoryMiB: int64(r.IntN(20000)), Cores: r.IntN(30)}},
			Topology:     modes[r.IntN(len(modes))],
			DevicePolicy: []Policy{Binpack, Spread}[r.IntN(2)],
		}
		if r.IntN(3) == 0 {
			req.Containers = append(req.Containers, Container{Name: "i", Init: true, Number: 1 + r.IntN(2), MemoryMiB: 1000, Cores: 5})
		}
		var gang *GangView
		if r.IntN(2) == 0 {
			gang = &GangView{Placed: map[string]Siblings{"r": {Tasks: 1, GPUs: []string{fmt.Sprintf("GPU-%d", r.IntN(n))}}}, PlacedTasks: 1}
		}
		gp, gr := pruned.Fit(req, node, gang)
		wp, wr := full.Fit(req, node, gang)
		if !reflect.DeepEqual(gp, wp) || !reflect.DeepEqual(gr, wr) {
			t.Fatalf("iteration %d: pruned search differs from exhaustive\nrequest %+v\npruned %+v %v\nexhaustive %+v %v", iter, req, gp, gr, wp, wr)
		}
	}
}

// TestSearchLargeNodes shows that 16-GPU nodes stay well inside the visit
// budget, so results there are exact too.
func TestSearchLargeNodes(t *testing.T) {
	all := func(n, nv int) *Node {
		node := &Node{Name: "big", Links: NewLinks(n)}
		for i := 0; i < n; i++ {
			node.GPUs = append(node.GPUs, GPU{UUID: fmt.Sprintf("GPU-%d", i), MemoryMiB: 81920, Healthy: true, NUMA: i / (n / 2), MaxShares: 10})
			for j := 0; j < i; j++ {
				level := PCIeSystem
				if i/(n/2) == j/(n/2) {
					level = PCIeNode
				}
				link := Link{PCIe: level}
				if nv < 0 && i/2 == j/2 { // pairs
					link.NVLinks = 4
				} else if nv > 0 {
					link.NVLinks = nv
				}
				node.Links.Set(i, j, link)
			}
		}
		return node
	}
	tests := []struct {
		name string
		node *Node
		n    int
		mode TopologyMode
		want []int
	}{
		{name: "NVSwitch 16 choose 8", node: all(16, 12), n: 8, mode: TopologyPrefer, want: []int{0, 1, 2, 3, 4, 5, 6, 7}},
		{name: "NVSwitch 16 choose 8, topology none", node: all(16, 12), n: 8, mode: TopologyNone, want: []int{0, 1, 2, 3, 4, 5, 6, 7}},
		{name: "PCIe-only 16 choose 8", node: all(16, 0), n: 8, mode: TopologyPrefer, want: []int{0, 1, 2, 3, 4, 5, 6, 7}},
		{name: "pairs 16 choose 8", node: all(16, -1), n: 8, mode: TopologyPrefer, want: []int{0, 1, 2, 3, 4, 5, 6, 7}},
		{name: "pairs 16 choose 5", node: all(16, -1), n: 5, mode: TopologyPrefer, want: []int{0, 1, 2, 3, 4}},
		{name: "NVSwitch 16 choose 4, required", node: all(16, 12), n: 4, mode: TopologyRequired, want: []int{0, 1, 2, 3}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var f Fitter
			req := &Request{Containers: []Container{{Name: "c", Number: tt.n, MemoryMiB: 1024, Cores: 10}}, Topology: tt.mode}
			p, reasons := f.Fit(req, tt.node, nil)
			if len(reasons) > 0 {
				t.Fatal(reasons)
			}
			var got []int
			for _, d := range p.Containers[0].Devices {
				got = append(got, d.Pos)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("set = %v, want %v", got, tt.want)
			}
			if f.s.visits >= searchBudget/4 {
				t.Errorf("visited %d search nodes, want well under the budget %d", f.s.visits, searchBudget)
			}
			t.Logf("%d visits", f.s.visits)
		})
	}
}

func TestScorerTablesAgree(t *testing.T) {
	var dev, node []string
	for p := range deviceScorers {
		dev = append(dev, string(p))
	}
	for p := range nodeScorers {
		node = append(node, string(p))
	}
	sort.Strings(dev)
	sort.Strings(node)
	if !reflect.DeepEqual(dev, node) {
		t.Errorf("device scorers %v and node scorers %v must offer the same policies", dev, node)
	}
}

func TestFragmentationBound(t *testing.T) {
	// Islands of 4, 2 and 1: 16+4+1 = 21. Removing 1 more GPU keeps at most
	// 16+4 = 20 (the singleton goes); removing 3 keeps at most 16 (then 4 left:
	// remove 1 + 2 of the pair).
	adj := make([]uint64, 7)
	link := func(i, j int) { adj[i] |= 1 << j; adj[j] |= 1 << i }
	link(0, 1)
	link(1, 2)
	link(2, 3)
	link(4, 5)
	free := uint64(0b1111111)
	for _, tt := range []struct{ remove, want int }{{0, 21}, {1, 20}, {3, 16}, {4, 9}, {7, 0}, {9, 0}} {
		if got := fragmentation(free, adj, tt.remove); got != int64(tt.want) {
			t.Errorf("fragmentation(remove %d) = %d, want %d", tt.remove, got, tt.want)
		}
	}
}

// TestSlotsMatchSimulation checks ScoreNode's exact count for single-GPU
// shapes against repeated Fit and Apply.
func TestSlotsMatchSimulation(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	var f Fitter
	for iter := 0; iter < 2000; iter++ {
		node := randomNode(r, 1+r.IntN(8))
		if r.IntN(4) == 0 {
			node.GPUs[0].UsedMemoryMiB, node.GPUs[0].UsedCores, node.GPUs[0].Shares, node.GPUs[0].Exclusive = 81920, 100, 1, 1
		}
		c := Container{Number: 1, MemoryMiB: int64(r.IntN(3)) * 8192, MemoryPercent: []int{0, 0, 10, 50}[r.IntN(4)], Cores: []int{0, 5, 30, 100}[r.IntN(4)]}
		req := &Request{Containers: []Container{c}}
		got, ok := slots(req, node)
		if !ok {
			t.Fatalf("slots refused %+v", c)
		}
		want := 0
		for sim := node.Clone(); want <= 200; want++ {
			p, reasons := f.Fit(req, sim, nil)
			if len(reasons) > 0 {
				break
			}
			if err := Apply(sim, p); err != nil {
				t.Fatal(err)
			}
		}
		if got != want {
			t.Fatalf("iteration %d: slots = %d, simulation fits %d (container %+v)", iter, got, want, c)
		}
	}
}
