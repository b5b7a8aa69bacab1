package placement_test

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/volcano-vgpu/volcano-vgpu/api"
	"github.com/volcano-vgpu/volcano-vgpu/plugins/placement"
)

// bytesIn hands out fuzz bytes, then zeros.
type bytesIn []byte

func (b *bytesIn) next() int {
	if len(*b) == 0 {
		return 0
	}
	v := (*b)[0]
	*b = (*b)[1:]
	return int(v)
}

var fuzzModels = []string{"NVIDIA A100-SXM4-80GB", "Tesla T4", "NVIDIA H100 80GB HBM3"}

// fuzzNode draws a node whose usage is within capacity.
func fuzzNode(in *bytesIn) *placement.Node {
	n := 1 + in.next()%10
	node := &placement.Node{Name: "f", Stale: in.next()%16 == 0, Links: placement.NewLinks(n)}
	for i := 0; i < n; i++ {
		g := placement.GPU{Index: i, UUID: fmt.Sprintf("GPU-%d", i), Model: fuzzModels[in.next()%3],
			MemoryMiB: []int64{1024, 15360, 81920}[in.next()%3], Healthy: in.next()%5 != 0, NUMA: in.next() % 2, MaxShares: in.next() % 5}
		if in.next()%7 == 0 {
			g.UsedMemoryMiB, g.UsedCores, g.Shares, g.Exclusive = g.MemoryMiB, 100, 1, 1
		} else {
			for t := in.next() % 3; t > 0 && g.Shares < g.ShareLimit(); t-- {
				mem, cores := g.MemoryMiB*int64(in.next()%8)/8, in.next()%60
				if g.UsedMemoryMiB+mem <= g.MemoryMiB && g.UsedCores+cores <= 100 {
					g.UsedMemoryMiB, g.UsedCores, g.Shares = g.UsedMemoryMiB+mem, g.UsedCores+cores, g.Shares+1
				}
			}
		}
		g.Mode = []placement.GPUMode{"", "", api.ModeTimeSliced, api.ModeMIG}[in.next()%4]
		node.GPUs = append(node.GPUs, g)
		for j := 0; j < i; j++ {
			node.Links.Set(i, j, placement.Link{NVLinks: []int{0, 0, 1, 4, 12}[in.next()%5], PCIe: placement.PCIeLevel(in.next() % 8)})
		}
	}
	return node
}

func fuzzRequest(in *bytesIn, gpus int) *placement.Request {
	req := &placement.Request{
		Topology:     []placement.TopologyMode{"", placement.TopologyPrefer, placement.TopologyRequired, placement.TopologyNone}[in.next()%4],
		DevicePolicy: []placement.Policy{"", placement.Binpack, placement.Spread}[in.next()%3],
	}
	for k := 1 + in.next()%3; k > 0; k-- {
		kind := in.next() % 8 // 0, 1: classic init; 2: sidecar; else app
		c := placement.Container{Name: fmt.Sprint("c", k), Init: kind < 3, Restartable: kind == 2, Number: in.next() % (gpus + 2), Cores: []int{0, 10, 25, 50, 100}[in.next()%5]}
		switch in.next() % 3 {
		case 0:
			c.MemoryMiB = int64(in.next()) * 512
		case 1:
			c.MemoryPercent = in.next() % 101
		}
		req.Containers = append(req.Containers, c)
	}
	filters := []string{"a100", "NVIDIA-tesla", "h100", "GPU-0", "GPU-3"}
	switch in.next() % 9 {
	case 6:
		req.Mode = []placement.GPUMode{api.ModeTimeSliced, api.ModeMIG, api.ModeMPS}[in.next()%3]
	case 7:
		req.SpreadGroup = true
	case 8:
		req.Mode, req.SpreadGroup = api.ModeTimeSliced, true
	case 1:
		req.TypeInclude = []string{filters[in.next()%3]}
	case 2:
		req.TypeExclude = []string{filters[in.next()%3]}
	case 3:
		req.UUIDInclude = []string{filters[3+in.next()%2], filters[3+in.next()%2]}
	case 4:
		req.UUIDExclude = []string{filters[3+in.next()%2]}
	}
	return req
}

func admitted(req *placement.Request, g *placement.GPU) bool {
	has := func(list []string, match func(string) bool) bool {
		for _, s := range list {
			if match(s) {
				return true
			}
		}
		return false
	}
	model := func(s string) bool { return strings.Contains(strings.ToUpper("NVIDIA-"+g.Model), strings.ToUpper(s)) }
	uuid := func(s string) bool { return s == g.UUID }
	mode := g.Mode
	if mode == "" {
		mode = api.ModeTimeSliced
	}
	return (req.Mode == "" || req.Mode == mode) &&
		(len(req.TypeInclude) == 0 || has(req.TypeInclude, model)) && !has(req.TypeExclude, model) &&
		(len(req.UUIDInclude) == 0 || has(req.UUIDInclude, uuid)) && !has(req.UUIDExclude, uuid)
}

// FuzzFit: Fit never panics and never books beyond capacity, tenants or
// exclusivity; Release undoes Apply exactly; scores stay in range.
func FuzzFit(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{8, 1, 0, 2, 1, 0, 3, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13})
	f.Add([]byte("\x07\x00\x00\x02\x02\x01\x04\x06\x01\x02\x02\x01\x04\x06\x01\x02\x02\x02\x04\x06\x03\x03\x02\x01\x01\x02\x04"))
	f.Add([]byte("fuzzing the placement core with a longer seed of assorted bytes 0123456789"))
	f.Fuzz(func(t *testing.T, data []byte) {
		in := bytesIn(data)
		node := fuzzNode(&in)
		req := fuzzRequest(&in, len(node.GPUs))
		var gang *placement.GangView
		if in.next()%2 == 0 {
			gang = &placement.GangView{Placed: map[string]placement.Siblings{"f": {Tasks: 1, GPUs: []string{"GPU-1"}}}, PlacedTasks: 1,
				Pending: []placement.Pending{{Request: req, Count: in.next() % 4}}}
		}
		before := node.Clone()
		p, reasons := placement.Fit(req, node, gang)
		if len(reasons) > 0 {
			var closest placement.Closest
			closest.Add(node.Name, reasons)
			memoryOrCores := false
			for _, r := range reasons {
				if r.Error() == "" || r.Short() == "" || strings.Contains(r.Error(), "reason code") {
					t.Fatalf("empty or unrendered reason text for %+v", r)
				}
				if r.Short() != r.ShortKey().Short() {
					t.Fatalf("Short differs from its key's: %q vs %q", r.Short(), r.ShortKey().Short())
				}
				memoryOrCores = memoryOrCores || (r.NodeLevel() && r.Best != "" && r.Want > 0)
			}
			if memoryOrCores != (closest.String() != "") {
				t.Fatalf("closest %q for reasons %v", closest.String(), reasons)
			}
			return
		}
		if len(p.Containers) != len(req.Containers) {
			t.Fatalf("%d container placements for %d containers", len(p.Containers), len(req.Containers))
		}
		for ci, cp := range p.Containers {
			c := req.Containers[ci]
			if len(cp.Devices) != c.Number {
				t.Fatalf("container %s: %d GPUs, asked %d", c.Name, len(cp.Devices), c.Number)
			}
			seen := map[int]bool{}
			for _, d := range cp.Devices {
				g := &node.GPUs[d.Pos]
				if seen[d.Pos] || g.UUID != d.UUID || !g.Healthy || !admitted(req, g) || d.Cores != c.Cores {
					t.Fatalf("container %s: bad device %+v (dup %v, GPU %+v)", c.Name, d, seen[d.Pos], g)
				}
				if req.SpreadGroup && gang != nil && d.UUID == "GPU-1" {
					t.Fatalf("container %s: spread group placed on its sibling's GPU-1", c.Name)
				}
				seen[d.Pos] = true
			}
		}
		if node.Stale && len(p.UUIDs()) > 0 {
			t.Fatalf("placed on a stale node")
		}
		after := node.Clone()
		if err := placement.Apply(after, p); err != nil {
			t.Fatal(err)
		}
		for i, g := range after.GPUs {
			b := before.GPUs[i]
			if g.UsedMemoryMiB > g.MemoryMiB || g.UsedCores > 100 || g.Shares > g.ShareLimit() {
				t.Fatalf("GPU %d over capacity: %+v (before %+v)", i, g, b)
			}
			if b.Exclusive > 0 && g != b {
				t.Fatalf("GPU %d held exclusively was joined: %+v -> %+v", i, b, g)
			}
			if g.Exclusive > b.Exclusive && b.Shares > 0 {
				t.Fatalf("GPU %d shared with another pod was taken exclusively: %+v -> %+v", i, b, g)
			}
		}
		for _, pol := range []placement.Policy{placement.Binpack, placement.Spread} {
			if s := placement.ScoreNode(req, node, p, gang, pol); math.IsNaN(s) || s < 0 || s > placement.MaxScore {
				t.Fatalf("%s score %v out of range", pol, s)
			}
		}
		if err := placement.Release(after, p); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(before, after, cmp.AllowUnexported(placement.Links{})); diff != "" {
			t.Fatalf("Release after Apply is not the identity (-before +after):\n%s", diff)
		}
		if diff := cmp.Diff(before, node, cmp.AllowUnexported(placement.Links{})); diff != "" {
			t.Fatalf("Fit or ScoreNode changed the node (-before +after):\n%s", diff)
		}
	})
}
