package migtable

import (
	"testing"

	"github.com/volcano-vgpu/volcano-vgpu/api"
)

// Every table agrees with itself: names say the compute slices, each
// profile's instance count fits on its placements without overlap, and
// memory grows with the memory slices a placement holds.
func TestTablesAreConsistent(t *testing.T) {
	for _, model := range Models() {
		t.Run(model, func(t *testing.T) {
			tab, _ := ForModel(model)
			ids, consts := map[uint32]bool{}, map[int]bool{}
			perSlice := int64(0) // MiB of one memory slice, from the 1g profile
			for _, p := range tab.Profiles {
				slices, err := api.ParseMIGProfileName("profile", p.Name)
				if err != nil || slices != p.Slices {
					t.Errorf("%s: name says %d slices (%v), table %d", p.Name, slices, err, p.Slices)
				}
				if ids[p.ID] || consts[p.NVML] {
					t.Errorf("%s: profile ID %d or NVML constant %d used twice", p.Name, p.ID, p.NVML)
				}
				ids[p.ID], consts[p.NVML] = true, true
				if got := maxDisjoint(p.Placements); got < p.Instances {
					t.Errorf("%s: %d instances, but at most %d placements fit together", p.Name, p.Instances, got)
				}
				for _, pl := range p.Placements {
					if pl.Start < 0 || pl.Size < 1 || pl.Start+pl.Size > tab.MemorySlices {
						t.Errorf("%s: placement %+v outside %d memory slices", p.Name, pl, tab.MemorySlices)
					}
				}
				size := p.Placements[0].Size
				if p.Slices == 1 && size == 1 {
					perSlice = p.MemoryMiB
				}
				// memory: about size × one slice's (4.75 GiB per slice on the A100-40GB)
				if perSlice > 0 && (p.MemoryMiB < int64(size)*perSlice || p.MemoryMiB > int64(size)*perSlice*11/10) {
					t.Errorf("%s: %d MiB on %d memory slices of %d MiB", p.Name, p.MemoryMiB, size, perSlice)
				}
			}
		})
	}
}

func maxDisjoint(ps []Placement) int {
	n, end := 0, -1
	for _, p := range ps { // sorted by start, one size per profile: greedy is optimal
		if p.Start >= end {
			n, end = n+1, p.Start+p.Size
		}
	}
	return n
}

func TestForModel(t *testing.T) {
	for _, tc := range []struct {
		model, first string
		ok           bool
	}{
		{"NVIDIA A100-SXM4-40GB", "1g.5gb", true},
		{"NVIDIA A100-PCIE-40GB", "1g.5gb", true},
		{"NVIDIA A100-SXM4-80GB", "1g.10gb", true},
		{"NVIDIA H100 80GB HBM3", "1g.10gb", true},
		{"NVIDIA L4", "", false},
	} {
		t.Run(tc.model, func(t *testing.T) {
			tab, ok := ForModel(tc.model)
			if ok != tc.ok || ok && tab.Profiles[0].Name != tc.first {
				t.Errorf("ForModel = %v, %t; want first profile %q, %t", tab.Profiles, ok, tc.first, tc.ok)
			}
		})
	}
}
