package placement_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/volcano-vgpu/volcano-vgpu/api"
	"github.com/volcano-vgpu/volcano-vgpu/plugins/placement"
	pt "github.com/volcano-vgpu/volcano-vgpu/plugins/placement/placementtest"
)

// fuzzMIGNode draws 1-4 A100 40GB GPUs, each time-sliced or MIG (on-demand
// or fixed) with legal, non-overlapping existing instances, some in use.
func fuzzMIGNode(in *bytesIn) *placement.Node {
	n := 1 + in.next()%4
	b := pt.Node("f").GPUs(n, a100x40, 40960)
	for i := 0; i < n; i++ {
		if in.next()%4 == 0 {
			continue // time-sliced
		}
		b.MIG(pt.MIGA100x40(), i)
		profiles := pt.MIGA100x40().Profiles
		var held uint32
		for k := in.next() % 4; k > 0; k-- {
			p := profiles[in.next()%len(profiles)]
			pl := p.Placements[in.next()%len(p.Placements)]
			mask := uint32(1<<pl.Size-1) << pl.Start
			if mask&held != 0 || (p.Instances == 1 && strings.Contains(p.Name, "+")) && held&0x80000000 != 0 {
				continue
			}
			held |= mask
			if strings.Contains(p.Name, "+") {
				held |= 0x80000000 // one media-engine instance
			}
			uuid := fmt.Sprintf("MIG-%d-%d", i, pl.Start)
			if in.next()%3 == 0 {
				b.InstanceInUse(i, p.Name, pl.Start, uuid)
			} else {
				b.Instance(i, p.Name, pl.Start, uuid)
			}
		}
		if in.next()%4 == 0 {
			b.Fixed(i)
		}
	}
	return b.Obj()
}

func fuzzMIGRequest(in *bytesIn) *placement.Request {
	r := pt.Req().Mode(api.ModeMIG).Policy([]placement.Policy{placement.Binpack, placement.Spread}[in.next()%2])
	for k := 1 + in.next()%3; k > 0; k-- {
		switch in.next() % 3 {
		case 0:
			r.GPUs(1, int64(in.next())*200, 0)
		case 1:
			r.Percent(1, in.next()%101, 0)
		default:
			r.GPUs(1, 0, 100)
		}
	}
	if in.next()%3 == 0 {
		names := []string{"1g.5gb", "1g.5gb+me", "3g.20gb", "7g.40gb", "1g.10gb", "2g.10gb", "4g.20gb", "1g.12gb"}
		r.MIGProfile(names[in.next()%len(names)])
	}
	return r.Obj()
}

// checkMIG: every instance of p is a legal placement of a profile of a
// healthy MIG GPU, overlaps nothing booked or existing but the idle
// instance it takes over, keeps fixed geometries and instance counts.
func checkMIG(t *testing.T, node *placement.Node, p placement.Placement) {
	t.Helper()
	held := map[int]uint32{}
	count := map[string]int{}
	for _, cp := range p.Containers {
		for _, d := range cp.Devices {
			g := &node.GPUs[d.Pos]
			if g.MIG == nil || !g.Healthy || d.MIG.Profile == "" {
				t.Fatalf("device %+v on GPU %+v", d, g)
			}
			var prof *api.MIGProfile
			for i := range g.MIG.Profiles {
				if g.MIG.Profiles[i].Name == d.MIG.Profile {
					prof = &g.MIG.Profiles[i]
				}
			}
			if prof == nil || !prof.Legal(d.MIG.Placement) || d.MemoryMiB != prof.MemoryMiB {
				t.Fatalf("device %+v: not a legal instance of the GPU", d)
			}
			mask := uint32(1<<d.MIG.Placement.Size-1) << d.MIG.Placement.Start
			if mask&(g.MIGHeld|held[d.Pos]) != 0 {
				t.Fatalf("device %+v overlaps booked slices %08b", d, g.MIGHeld|held[d.Pos])
			}
			held[d.Pos] |= mask
			taken := false
			for _, in := range g.MIG.Instances {
				if !in.Placement.Overlaps(d.MIG.Placement) {
					continue
				}
				if in.Profile != d.MIG.Profile || in.Placement != d.MIG.Placement || in.InUse || in.UUID != d.MIG.UUID {
					t.Fatalf("device %+v overlaps instance %+v", d, in)
				}
				taken = true
			}
			if g.MIG.Fixed && !taken {
				t.Fatalf("device %+v is no instance of the fixed geometry %+v", d, g.MIG.Instances)
			}
			if !taken {
				key := fmt.Sprint(d.Pos, prof.Name)
				count[key]++
				existing := int(g.MIGBooked[indexOf(g.MIG, prof.Name)])
				for _, in := range g.MIG.Instances {
					if in.Profile == prof.Name && (uint32(1<<in.Placement.Size-1)<<in.Placement.Start)&g.MIGHeld == 0 {
						existing++
					}
				}
				if existing+count[key] > prof.Instances {
					t.Fatalf("device %+v: %d instances of %s, at most %d", d, existing+count[key], prof.Name, prof.Instances)
				}
			}
		}
	}
}

func indexOf(m *placement.MIG, name string) int {
	for i := range m.Profiles {
		if m.Profiles[i].Name == name {
			return i
		}
	}
	return 0
}

// FuzzFitMIG: MIG instances are legal, never overlap, keep fixed
// geometries; Release undoes Apply; two pods booked one after the other
// never share a slice.
func FuzzFitMIG(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{3, 1, 2, 4, 1, 0, 2, 1, 1, 0, 0, 2, 2, 1, 0, 1, 7, 0, 3, 1, 2})
	f.Add([]byte("a MIG node with assorted instances 0123456789 and two pods asking"))
	f.Fuzz(func(t *testing.T, data []byte) {
		in := bytesIn(data)
		node := fuzzMIGNode(&in)
		for pod := 0; pod < 2; pod++ {
			req := fuzzMIGRequest(&in)
			before := node.Clone()
			p, reasons := placement.Fit(req, node, nil)
			if len(reasons) > 0 {
				for _, r := range reasons {
					if r.Error() == "" || strings.Contains(r.Error(), "reason code") || r.Short() != r.ShortKey().Short() {
						t.Fatalf("unrendered reason %+v", r)
					}
				}
				return
			}
			p = p.Clone()
			checkMIG(t, node, p)
			after := node.Clone()
			if err := placement.Apply(after, p); err != nil {
				t.Fatal(err)
			}
			again := after.Clone()
			if err := placement.Release(again, p); err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(before, again, cmp.AllowUnexported(placement.Links{})); d != "" {
				t.Fatalf("Release after Apply is not the identity:\n%s", d)
			}
			node = after // the next pod sees this one booked
		}
	})
}
