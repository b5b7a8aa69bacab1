// Package migtable holds NVIDIA's published MIG GPU instance profiles and
// their legal placements for the GPUs the simulated cluster can put in MIG
// mode: A100 40GB, A100 80GB and H100 80GB.
//
// Sources: NVIDIA's Multi-Instance GPU user guide (the "Supported MIG
// Profiles" tables and the "nvidia-smi mig -lgip / -lgipp" examples, whose
// placements are written {starts}:size in memory slices) and the per-GPU
// tables of NVIDIA's go-nvml mock (pkg/nvml/mock/gpus). Memory is what
// nvidia-smi mig -lgip reports, in MiB (e.g. 4.75 GiB = 4864 MiB).
package migtable

import (
	"slices"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// Placement is a start and a size in memory slices, as NVML's
// GpuInstancePlacement.
type Placement struct{ Start, Size int }

// Profile is one GPU instance profile of one GPU model.
type Profile struct {
	Name string // as nvidia-smi names it, without "MIG ": 1g.10gb+me
	// NVML is the profile's NVML constant (nvml.GPU_INSTANCE_PROFILE_*),
	// the argument of GetGpuInstanceProfileInfo.
	NVML int
	// ID is the profile ID NVML reports (GpuInstanceProfileInfo.Id) and
	// nvidia-smi prints (19 for 1g.5gb).
	ID         uint32
	Slices     int // compute slices
	SMs        int // multiprocessors
	MemoryMiB  int64
	Instances  int // at most on one GPU
	Placements []Placement
	// Media: the profile holds the GPU's media engines (+me): one JPEG
	// decoder and one OFA.
	Media bool
}

// Table is the MIG geometry of one GPU model.
type Table struct {
	MemorySlices int
	Profiles     []Profile
}

// Profile returns the profile of that name.
func (t Table) Profile(name string) (Profile, bool) {
	i := slices.IndexFunc(t.Profiles, func(p Profile) bool { return p.Name == name })
	if i < 0 {
		return Profile{}, false
	}
	return t.Profiles[i], true
}

// ByNVML returns the profile of NVML constant c.
func (t Table) ByNVML(c int) (Profile, bool) {
	i := slices.IndexFunc(t.Profiles, func(p Profile) bool { return p.NVML == c })
	if i < 0 {
		return Profile{}, false
	}
	return t.Profiles[i], true
}

// ByID returns the profile NVML reports as id.
func (t Table) ByID(id uint32) (Profile, bool) {
	i := slices.IndexFunc(t.Profiles, func(p Profile) bool { return p.ID == id })
	if i < 0 {
		return Profile{}, false
	}
	return t.Profiles[i], true
}

// The placements every A100 and H100 80GB table shares: one memory slice
// per 1g instance (slice 7 is left to the larger ones), pairs for 2g and
// the doubled 1g, halves for 3g, the first half for 4g, all eight for 7g.
func ones() []Placement {
	return []Placement{{0, 1}, {1, 1}, {2, 1}, {3, 1}, {4, 1}, {5, 1}, {6, 1}}
}
func pairs() []Placement  { return []Placement{{0, 2}, {2, 2}, {4, 2}, {6, 2}} }
func twoGs() []Placement  { return []Placement{{0, 2}, {2, 2}, {4, 2}} }
func halves() []Placement { return []Placement{{0, 4}, {4, 4}} }

// eightSlice builds the table of an 8-memory-slice GPU from its profile
// names, memory and SM counts, in the order 1g, 1g+me, 1g doubled, 2g, 3g,
// 4g, 7g.
func eightSlice(names [7]string, mib [7]int64, sms [7]int) Table {
	return Table{MemorySlices: 8, Profiles: []Profile{
		{Name: names[0], NVML: nvml.GPU_INSTANCE_PROFILE_1_SLICE, ID: 19, Slices: 1, SMs: sms[0], MemoryMiB: mib[0], Instances: 7, Placements: ones()},
		{Name: names[1], NVML: nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV1, ID: 20, Slices: 1, SMs: sms[1], MemoryMiB: mib[1], Instances: 1, Placements: ones(), Media: true},
		{Name: names[2], NVML: nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV2, ID: 15, Slices: 1, SMs: sms[2], MemoryMiB: mib[2], Instances: 4, Placements: pairs()},
		{Name: names[3], NVML: nvml.GPU_INSTANCE_PROFILE_2_SLICE, ID: 14, Slices: 2, SMs: sms[3], MemoryMiB: mib[3], Instances: 3, Placements: twoGs()},
		{Name: names[4], NVML: nvml.GPU_INSTANCE_PROFILE_3_SLICE, ID: 9, Slices: 3, SMs: sms[4], MemoryMiB: mib[4], Instances: 2, Placements: halves()},
		{Name: names[5], NVML: nvml.GPU_INSTANCE_PROFILE_4_SLICE, ID: 5, Slices: 4, SMs: sms[5], MemoryMiB: mib[5], Instances: 1, Placements: []Placement{{0, 4}}},
		{Name: names[6], NVML: nvml.GPU_INSTANCE_PROFILE_7_SLICE, ID: 0, Slices: 7, SMs: sms[6], MemoryMiB: mib[6], Instances: 1, Placements: []Placement{{0, 8}}},
	}}
}

// A100 40GB (SXM4 and PCIe): 108 SMs, 14 per compute slice.
func a100x40() Table {
	return eightSlice(
		[7]string{"1g.5gb", "1g.5gb+me", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"},
		[7]int64{4864, 4864, 9856, 9856, 19968, 19968, 40192},
		[7]int{14, 14, 14, 28, 42, 56, 98})
}

// A100 80GB (SXM4 and PCIe).
func a100x80() Table {
	return eightSlice(
		[7]string{"1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"},
		[7]int64{9856, 9856, 19968, 19968, 40192, 40192, 80384},
		[7]int{14, 14, 14, 28, 42, 56, 98})
}

// H100 80GB (SXM5 HBM3 and PCIe): 132 SMs.
func h100x80() Table {
	return eightSlice(
		[7]string{"1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"},
		[7]int64{9984, 9984, 20096, 20096, 40448, 40448, 81152},
		[7]int{16, 16, 26, 32, 60, 64, 132})
}

// models maps NVML device names to their tables.
func models() map[string]func() Table {
	return map[string]func() Table{
		"NVIDIA A100-SXM4-40GB": a100x40,
		"NVIDIA A100-PCIE-40GB": a100x40,
		"NVIDIA A100-SXM4-80GB": a100x80,
		"NVIDIA A100 80GB PCIe": a100x80,
		"NVIDIA H100 80GB HBM3": h100x80,
		"NVIDIA H100 PCIe":      h100x80,
	}
}

// ForModel returns the MIG table of the GPU NVML names model.
func ForModel(model string) (Table, bool) {
	f, ok := models()[model]
	if !ok {
		return Table{}, false
	}
	return f(), true
}

// Models lists the model names that have a table, sorted.
func Models() []string {
	var out []string
	for m := range models() {
		out = append(out, m)
	}
	slices.Sort(out)
	return out
}
