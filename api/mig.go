package api

import (
	"fmt"
	"strconv"
	"strings"
)

// MIG limits: no GPU has more memory slices, profiles or instances than
// this (A100 and H100: 8 memory slices, 7 compute slices, 7 profiles).
const (
	MaxMIGSlices   = 16
	MaxMIGProfiles = 32
)

// MIGGeometry says who decides a MIG GPU's instances.
type MIGGeometry string

const (
	// MIGFixed: the instances are those of the device plugin's
	// configuration; the scheduler only hands out free ones.
	MIGFixed MIGGeometry = "fixed"
	// MIGOnDemand: the scheduler picks a free legal placement of a
	// profile; the device plugin creates the instance for the pod.
	MIGOnDemand MIGGeometry = "on-demand"
)

// MIGPlacement is where a GPU instance sits on the GPU's memory slices:
// slices Start to Start+Size-1, as NVML's GpuInstancePlacement says.
type MIGPlacement struct {
	Start int `json:"start"`
	Size  int `json:"size"`
}

// End is the first memory slice after p.
func (p MIGPlacement) End() int { return p.Start + p.Size }

// Overlaps reports whether p and q share a memory slice.
func (p MIGPlacement) Overlaps(q MIGPlacement) bool { return p.Start < q.End() && q.Start < p.End() }

func (p MIGPlacement) String() string { return fmt.Sprintf("%d+%d", p.Start, p.Size) }

// MIGProfile is one GPU instance profile of a GPU, as NVML describes it.
type MIGProfile struct {
	// Name as nvidia-smi spells it without "MIG ": 1g.10gb, 1g.10gb+me.
	Name string `json:"name"`
	// Slices: compute slices (the 1 of 1g.10gb).
	Slices    int   `json:"slices"`
	MemoryMiB int64 `json:"memoryMiB"`
	// Instances: how many of this profile the whole GPU holds at once.
	Instances int `json:"instances"`
	// Placements: the legal placements, in NVML's order.
	Placements []MIGPlacement `json:"placements"`
}

// Legal reports whether p is one of the profile's placements.
func (m MIGProfile) Legal(p MIGPlacement) bool {
	for _, q := range m.Placements {
		if q == p {
			return true
		}
	}
	return false
}

// MIGInstance is one GPU instance that exists on a GPU.
type MIGInstance struct {
	Profile   string       `json:"profile"`
	Placement MIGPlacement `json:"placement"`
	// UUID of the MIG device (MIG-…); "" while the instance has no
	// compute instance yet.
	UUID string `json:"uuid,omitempty"`
	// InUse: processes run on it now.
	InUse bool `json:"inUse,omitempty"`
}

// MIG is the MIG state of a GPU in mode mig.
type MIG struct {
	Geometry MIGGeometry `json:"geometry"`
	// MemorySlices: how many memory slices the GPU has (8 on A100 and H100).
	MemorySlices int           `json:"memorySlices"`
	Profiles     []MIGProfile  `json:"profiles"`
	Instances    []MIGInstance `json:"instances,omitempty"`
}

// Profile returns the profile of that name.
func (m *MIG) Profile(name string) (MIGProfile, bool) {
	for _, p := range m.Profiles {
		if p.Name == name {
			return p, true
		}
	}
	return MIGProfile{}, false
}

// MIGDevice is a container's MIG instance in an assignment: which profile
// at which placement of the GPU named by the DeviceShare.
type MIGDevice struct {
	Profile   string       `json:"profile"`
	Placement MIGPlacement `json:"placement"`
	// UUID of the MIG device once it exists (MIG-…); "" until then.
	UUID string `json:"uuid,omitempty"`
}

// ParseMIGProfileName checks a profile name (1g.10gb, 1g.10gb+me, 7g.80gb)
// found under key and returns its compute slices.
func ParseMIGProfileName(key, name string) (int, error) {
	bad := func() (int, error) {
		return 0, fieldErr(key, "", "a MIG profile name such as 1g.10gb or 1g.10gb+me (compute slices, g., memory in GB, gb, optional +/- suffixes)", fmt.Sprintf("%q", name))
	}
	g, rest, ok := strings.Cut(name, "g.")
	if !ok || len(name) > 32 {
		return bad()
	}
	slices, err := strconv.Atoi(g)
	if err != nil || slices < 1 || slices > MaxMIGSlices || g[0] == '0' || g[0] == '+' {
		return bad()
	}
	i := 0
	for i < len(rest) && '0' <= rest[i] && rest[i] <= '9' {
		i++
	}
	if i == 0 || rest[0] == '0' || !strings.HasPrefix(rest[i:], "gb") {
		return bad()
	}
	for _, suffix := range splitSuffixes(rest[i+2:]) {
		if !validSuffix(suffix) {
			return bad()
		}
	}
	return slices, nil
}

// splitSuffixes cuts "+me-gfx" into "+me", "-gfx"; "" into none.
func splitSuffixes(s string) []string {
	var out []string
	for s != "" {
		j := strings.IndexAny(s[1:], "+-")
		if j < 0 {
			return append(out, s)
		}
		out, s = append(out, s[:j+1]), s[j+1:]
	}
	return out
}

func validSuffix(s string) bool {
	if len(s) < 2 || s[0] != '+' && s[0] != '-' {
		return false
	}
	for _, r := range s[1:] {
		if (r < 'a' || r > 'z') && (r < '0' || r > '9') {
			return false
		}
	}
	return true
}

// validate checks a GPU's MIG state; f names a field of the GPU.
func (m *MIG) validate(k string, f func(string) string) error {
	switch {
	case m.Geometry != MIGFixed && m.Geometry != MIGOnDemand:
		return fieldErr(k, f("mig.geometry"), fmt.Sprintf("%s or %s", MIGFixed, MIGOnDemand), fmt.Sprintf("%q", m.Geometry))
	case m.MemorySlices < 1 || m.MemorySlices > MaxMIGSlices:
		return fieldErr(k, f("mig.memorySlices"), fmt.Sprintf("1 to %d memory slices", MaxMIGSlices), m.MemorySlices)
	case len(m.Profiles) == 0 || len(m.Profiles) > MaxMIGProfiles:
		return fieldErr(k, f("mig.profiles"), fmt.Sprintf("1 to %d GPU instance profiles", MaxMIGProfiles), len(m.Profiles))
	case len(m.Instances) > m.MemorySlices:
		return fieldErr(k, f("mig.instances"), fmt.Sprintf("at most one instance per memory slice (%d)", m.MemorySlices), len(m.Instances))
	}
	names := make(map[string]int, len(m.Profiles))
	for i, p := range m.Profiles {
		pf := func(name string) string { return f(fmt.Sprintf("mig.profiles[%d].%s", i, name)) }
		slices, err := ParseMIGProfileName(k, p.Name)
		if err != nil {
			return fieldErr(k, pf("name"), err.(*FieldError).Expected, fmt.Sprintf("%q", p.Name))
		}
		if j, dup := names[p.Name]; dup {
			return fieldErr(k, pf("name"), fmt.Sprintf("a name not already used by profiles[%d]", j), p.Name)
		}
		names[p.Name] = i
		switch {
		case p.Slices != slices:
			return fieldErr(k, pf("slices"), fmt.Sprintf("%d, the compute slices its name %s says", slices, p.Name), p.Slices)
		case p.MemoryMiB <= 0 || p.MemoryMiB > 1<<24:
			return fieldErr(k, pf("memoryMiB"), "a positive number of MiB", p.MemoryMiB)
		case p.Instances < 1 || p.Instances > m.MemorySlices:
			return fieldErr(k, pf("instances"), fmt.Sprintf("1 to %d (one per memory slice at most)", m.MemorySlices), p.Instances)
		case len(p.Placements) == 0 || len(p.Placements) > m.MemorySlices:
			return fieldErr(k, pf("placements"), fmt.Sprintf("1 to %d placements", m.MemorySlices), len(p.Placements))
		}
		for j, pl := range p.Placements {
			if pl.Start < 0 || pl.Size < 1 || pl.End() > m.MemorySlices {
				return fieldErr(k, pf(fmt.Sprintf("placements[%d]", j)), fmt.Sprintf("a start and size within the %d memory slices", m.MemorySlices), pl)
			}
		}
	}
	uuids := map[string]int{}
	for i, in := range m.Instances {
		inf := func(name string) string { return f(fmt.Sprintf("mig.instances[%d].%s", i, name)) }
		p, ok := m.Profile(in.Profile)
		switch {
		case !ok:
			return fieldErr(k, inf("profile"), "one of the GPU's profiles", fmt.Sprintf("%q", in.Profile))
		case !p.Legal(in.Placement):
			return fieldErr(k, inf("placement"), fmt.Sprintf("a legal placement of %s %v", p.Name, p.Placements), in.Placement)
		case in.UUID != "" && !validUUID(in.UUID):
			return fieldErr(k, inf("uuid"), "a MIG device UUID such as MIG-5a7c…, or none", fmt.Sprintf("%q", in.UUID))
		}
		if j, dup := uuids[in.UUID]; dup && in.UUID != "" {
			return fieldErr(k, inf("uuid"), fmt.Sprintf("a UUID not already used by instances[%d]", j), in.UUID)
		}
		uuids[in.UUID] = i
		for j, other := range m.Instances[:i] {
			if other.Placement.Overlaps(in.Placement) {
				return fieldErr(k, inf("placement"), fmt.Sprintf("memory slices not held by instances[%d] (%s at %v)", j, other.Profile, other.Placement), in.Placement)
			}
		}
	}
	return nil
}

// validate checks a container's MIG device; f names a field of its
// DeviceShare.
func (d *MIGDevice) validate(k string, f func(string) string) error {
	if _, err := ParseMIGProfileName(k, d.Profile); err != nil {
		return fieldErr(k, f("mig.profile"), err.(*FieldError).Expected, fmt.Sprintf("%q", d.Profile))
	}
	switch {
	case d.Placement.Start < 0 || d.Placement.Size < 1 || d.Placement.End() > MaxMIGSlices:
		return fieldErr(k, f("mig.placement"), fmt.Sprintf("a start and size within %d memory slices", MaxMIGSlices), d.Placement)
	case d.UUID != "" && !validUUID(d.UUID):
		return fieldErr(k, f("mig.uuid"), "a MIG device UUID such as MIG-5a7c…, or none", fmt.Sprintf("%q", d.UUID))
	}
	return nil
}
