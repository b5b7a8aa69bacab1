package api

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// migA100 is the MIG state of an A100-SXM4-40GB: three of its profiles, with
// a 3g.20gb instance on slices 4-7 and a 1g.5gb one on slice 0.
func migA100() *MIG {
	return &MIG{
		Geometry: MIGOnDemand, MemorySlices: 8,
		Profiles: []MIGProfile{
			{Name: "1g.5gb", Slices: 1, MemoryMiB: 4864, Instances: 7, Placements: []MIGPlacement{{0, 1}, {1, 1}, {2, 1}, {3, 1}, {4, 1}, {5, 1}, {6, 1}}},
			{Name: "3g.20gb", Slices: 3, MemoryMiB: 19968, Instances: 2, Placements: []MIGPlacement{{0, 4}, {4, 4}}},
			{Name: "7g.40gb", Slices: 7, MemoryMiB: 40192, Instances: 1, Placements: []MIGPlacement{{0, 8}}},
		},
		Instances: []MIGInstance{
			{Profile: "3g.20gb", Placement: MIGPlacement{4, 4}, UUID: "MIG-aaaa", InUse: true},
			{Profile: "1g.5gb", Placement: MIGPlacement{0, 1}},
		},
	}
}

func migInventory() Inventory {
	inv := pairInventory()
	inv.GPUs[1].Mode, inv.GPUs[1].MIG = ModeMIG, migA100()
	return inv
}

func TestDecodeMIGInventoryErrors(t *testing.T) {
	tests := []struct {
		name   string
		modify func(g *GPU)
		want   string
	}{
		{"mig mode without MIG state", func(g *GPU) { g.MIG = nil },
			"field gpus[1].mig: expected the GPU's MIG profiles for a healthy GPU in mode mig, got none"},
		{"MIG state on a time-sliced GPU", func(g *GPU) { g.Mode = ModeTimeSliced },
			"field gpus[1].mig: expected no MIG state outside mode mig, got mode time-sliced"},
		{"MIG state on a GPU with no mode", func(g *GPU) { g.Mode = "" },
			"field gpus[1].mig: expected no MIG state outside mode mig, got mode time-sliced"},
		{"unknown geometry", func(g *GPU) { g.MIG.Geometry = "dynamic" },
			`field gpus[1].mig.geometry: expected fixed or on-demand, got "dynamic"`},
		{"no memory slices", func(g *GPU) { g.MIG.MemorySlices = 0 },
			"field gpus[1].mig.memorySlices: expected 1 to 16 memory slices, got 0"},
		{"no profiles", func(g *GPU) { g.MIG.Profiles, g.MIG.Instances = nil, nil },
			"field gpus[1].mig.profiles: expected 1 to 32 GPU instance profiles, got 0"},
		{"profile name without g.", func(g *GPU) { g.MIG.Profiles[0].Name = "1c.5gb" },
			`field gpus[1].mig.profiles[0].name: expected a MIG profile name such as 1g.10gb`},
		{"profile named twice", func(g *GPU) { g.MIG.Profiles[1].Name = "1g.5gb"; g.MIG.Profiles[1].Slices = 1 },
			"field gpus[1].mig.profiles[1].name: expected a name not already used by profiles[0], got 1g.5gb"},
		{"slices disagree with the name", func(g *GPU) { g.MIG.Profiles[1].Slices = 4 },
			"field gpus[1].mig.profiles[1].slices: expected 3, the compute slices its name 3g.20gb says, got 4"},
		{"no memory", func(g *GPU) { g.MIG.Profiles[0].MemoryMiB = 0 },
			"field gpus[1].mig.profiles[0].memoryMiB: expected a positive number of MiB, got 0"},
		{"more instances than memory slices", func(g *GPU) { g.MIG.Profiles[0].Instances = 9 },
			"field gpus[1].mig.profiles[0].instances: expected 1 to 8 (one per memory slice at most), got 9"},
		{"no placements", func(g *GPU) { g.MIG.Profiles[2].Placements = nil },
			"field gpus[1].mig.profiles[2].placements: expected 1 to 8 placements, got 0"},
		{"placement past the last slice", func(g *GPU) { g.MIG.Profiles[1].Placements[1] = MIGPlacement{6, 4} },
			"field gpus[1].mig.profiles[1].placements[1]: expected a start and size within the 8 memory slices, got 6+4"},
		{"instance of an unknown profile", func(g *GPU) { g.MIG.Instances[1].Profile = "2g.10gb" },
			`field gpus[1].mig.instances[1].profile: expected one of the GPU's profiles, got "2g.10gb"`},
		{"instance at an illegal placement", func(g *GPU) { g.MIG.Instances[0].Placement = MIGPlacement{2, 4} },
			"field gpus[1].mig.instances[0].placement: expected a legal placement of 3g.20gb [0+4 4+4], got 2+4"},
		{"overlapping instances", func(g *GPU) { g.MIG.Instances[1].Placement = MIGPlacement{5, 1} },
			"field gpus[1].mig.instances[1].placement: expected memory slices not held by instances[0] (3g.20gb at 4+4), got 5+1"},
		{"instance UUID with a space", func(g *GPU) { g.MIG.Instances[0].UUID = "MIG a" },
			`field gpus[1].mig.instances[0].uuid: expected a MIG device UUID such as MIG-5a7c…, or none, got "MIG a"`},
		{"instance UUID twice", func(g *GPU) { g.MIG.Instances[1].UUID = "MIG-aaaa" },
			"field gpus[1].mig.instances[1].uuid: expected a UUID not already used by instances[0], got MIG-aaaa"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			inv := migInventory()
			inv.Version = Version
			tc.modify(&inv.GPUs[1])
			if _, err := EncodeInventory(inv); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("EncodeInventory error = %v, want it to contain %q", err, tc.want)
			}
			// the same value written by another component is refused on read
			b, err := jsonMarshal(inv)
			if err != nil {
				t.Fatal(err)
			}
			_, err = DecodeInventory(b)
			if err == nil || !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("DecodeInventory error = %v, want ErrMalformed containing %q", err, tc.want)
			}
		})
	}
}

func TestParseMIGProfileName(t *testing.T) {
	for _, tc := range []struct {
		name   string
		slices int // 0: refused
	}{
		{"1g.5gb", 1}, {"1g.10gb+me", 1}, {"7g.80gb", 7}, {"1g.20gb", 1}, {"4g.40gb", 4},
		{"1g.12gb-me", 1}, {"1g.24gb+gfx+me", 1}, {"16g.192gb", 16},
		{"", 0}, {"1g", 0}, {"g.10gb", 0}, {"0g.10gb", 0}, {"01g.10gb", 0}, {"17g.10gb", 0}, {"+1g.10gb", 0},
		{"1g.gb", 0}, {"1g.010gb", 0}, {"1g.10GB", 0}, {"1g.10gb+", 0}, {"1g.10gb+ME", 0}, {"1g.10gb me", 0},
		{"MIG 1g.10gb", 0}, {"1g.10gbx", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseMIGProfileName("profile", tc.name)
			if tc.slices == 0 {
				if err == nil || !strings.Contains(err.Error(), "profile: expected a MIG profile name such as 1g.10gb") {
					t.Fatalf("ParseMIGProfileName(%q) = %d, %v; want the profile name error", tc.name, got, err)
				}
				return
			}
			if err != nil || got != tc.slices {
				t.Errorf("ParseMIGProfileName(%q) = %d, %v; want %d", tc.name, got, err, tc.slices)
			}
		})
	}
}

func TestMIGPlacementOverlaps(t *testing.T) {
	for _, tc := range []struct {
		name string
		p, q MIGPlacement
		want bool
	}{
		{"same", MIGPlacement{0, 4}, MIGPlacement{0, 4}, true},
		{"adjacent", MIGPlacement{0, 4}, MIGPlacement{4, 4}, false},
		{"inside", MIGPlacement{0, 8}, MIGPlacement{5, 1}, true},
		{"last slice of one, first of the other", MIGPlacement{2, 2}, MIGPlacement{3, 1}, true},
		{"apart", MIGPlacement{0, 1}, MIGPlacement{6, 2}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.p.Overlaps(tc.q); got != tc.want {
				t.Errorf("%v.Overlaps(%v) = %t, want %t", tc.p, tc.q, got, tc.want)
			}
			if got := tc.q.Overlaps(tc.p); got != tc.want {
				t.Errorf("%v.Overlaps(%v) = %t, want %t (symmetric)", tc.q, tc.p, got, tc.want)
			}
		})
	}
}

func migAssignment() Assignment {
	a := sampleAssignment()
	a.Containers[2].Devices = []DeviceShare{{UUID: "GPU-0001", MemoryMiB: 19968, Cores: 100,
		MIG: &MIGDevice{Profile: "3g.20gb", Placement: MIGPlacement{0, 4}, UUID: "MIG-bbbb"}}}
	return a
}

func TestMIGAssignmentRoundTrip(t *testing.T) {
	in := migAssignment()
	s, err := EncodeAssignment(in)
	if err != nil {
		t.Fatal(err)
	}
	out, err := DecodeAssignment(s)
	if err != nil {
		t.Fatal(err)
	}
	in.Version = Version
	if d := cmp.Diff(in, out); d != "" {
		t.Errorf("round trip (-in +out):\n%s", d)
	}
}

func TestDecodeMIGAssignmentErrors(t *testing.T) {
	tests := []struct {
		name   string
		modify func(d *MIGDevice)
		want   string
	}{
		{"bad profile", func(d *MIGDevice) { d.Profile = "3g" },
			`field containers[2].devices[0].mig.profile: expected a MIG profile name such as 1g.10gb`},
		{"empty placement", func(d *MIGDevice) { d.Placement.Size = 0 },
			"field containers[2].devices[0].mig.placement: expected a start and size within 16 memory slices, got 0+0"},
		{"negative start", func(d *MIGDevice) { d.Placement.Start = -1 },
			"field containers[2].devices[0].mig.placement: expected a start and size within 16 memory slices, got -1+4"},
		{"UUID with a comma", func(d *MIGDevice) { d.UUID = "MIG-a,b" },
			`field containers[2].devices[0].mig.uuid: expected a MIG device UUID such as MIG-5a7c…, or none, got "MIG-a,b"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a := migAssignment()
			a.Version = Version
			tc.modify(a.Containers[2].Devices[0].MIG)
			b, err := jsonMarshal(a)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := DecodeAssignment(b); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("DecodeAssignment error = %v, want it to contain %q", err, tc.want)
			}
			if _, err := EncodeAssignment(a); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("EncodeAssignment error = %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

// jsonMarshal renders v as another component might, without validating.
func jsonMarshal(v any) (string, error) {
	b, err := json.Marshal(v)
	return string(b), err
}

// A GPU NVML could not describe is published unhealthy, in its configured
// mode, without MIG state.
func TestUnhealthyMIGGPUWithoutState(t *testing.T) {
	inv := migInventory()
	inv.GPUs[1].MIG, inv.GPUs[1].Healthy = nil, false
	if _, err := EncodeInventory(inv); err != nil {
		t.Errorf("EncodeInventory: %v", err)
	}
}
