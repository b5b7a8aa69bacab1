package placement

import (
	"math/bits"
	"slices"
	"strconv"
	"strings"

	"github.com/volcano-vgpu/volcano-vgpu/api"
)

// MIG asks (Request.Mode mig) are placed apart from shares of GPUs: each GPU
// container gets one MIG instance of one MIG GPU, a profile at one of the
// profile's legal placements whose memory slices no instance holds.
//
// The profile: Request.MIGProfile when named, else the smallest (memory,
// then compute slices) profile without media suffix whose memory holds the
// container's (a percentage is of the GPU's memory; no memory asked: the
// largest profile, the whole GPU), as Volcano's deviceshare maps memory to
// the smallest instance that fits. When that profile has no free placement
// left on a GPU, the next larger one is taken. The container's memory cap
// is its ask when the profile has more (libvcuda caps it inside the
// instance; the instance's SMs stay its own), else the profile's memory. A
// named profile with less memory than the ask is refused
// (CodeMIGProfileSmall), not capped.
//
// A placement is free when no booked instance (GPU.MIGHeld) holds its
// slices and no instance the inventory lists overlaps it, except one of the
// same profile at the same placement that nothing uses: the pod takes that
// instance over. A fixed geometry offers its existing instances only.
// Existing instances thus lock the geometry: a later ask fits around them,
// never through them.
//
// Between GPUs: the smaller instance first (less memory wasted), then the
// device policy (binpack: the GPU with the most memory slices held; spread:
// the fewest), then the instance that leaves the most room (the largest
// profile still placeable, then the most free placements), then an existing
// instance over a new one, then lower positions.

// MIG is a MIG GPU's geometry as its inventory publishes it.
type MIG struct {
	Fixed        bool
	MemorySlices int
	Profiles     []api.MIGProfile
	Instances    []api.MIGInstance
}

func sliceMask(p api.MIGPlacement) uint32 {
	if p.Start < 0 || p.Size <= 0 || p.Start+p.Size > 32 {
		return 0
	}
	return (1<<p.Size - 1) << p.Start
}

// migCand is one instance a container could get.
type migCand struct {
	pos      int
	profile  int // index in the GPU's MIG.Profiles
	place    api.MIGPlacement
	instance string // UUID of the existing instance taken over ("" = new or none yet)
	reuse    bool   // an existing instance
	held     int    // memory slices held on the GPU before
	room     [2]int // largest profile slices placeable after, free placements after
}

// better orders candidates; policy decides between GPUs.
func (a *migCand) better(b *migCand, gpus []GPU, policy Policy) bool {
	pa, pb := &gpus[a.pos].MIG.Profiles[a.profile], &gpus[b.pos].MIG.Profiles[b.profile]
	switch {
	case pa.MemoryMiB != pb.MemoryMiB:
		return pa.MemoryMiB < pb.MemoryMiB
	case pa.Slices != pb.Slices:
		return pa.Slices < pb.Slices
	case a.held != b.held:
		return (a.held > b.held) == (policy != Spread)
	case a.room != b.room:
		return a.room[0] > b.room[0] || a.room[0] == b.room[0] && a.room[1] > b.room[1]
	case a.reuse != b.reuse:
		return a.reuse
	case a.pos != b.pos:
		return a.pos < b.pos
	}
	return a.place.Start < b.place.Start
}

// migProfiles lists the profiles (indexes into m.Profiles) container c may
// get, smallest first; code says why none.
func (r *Request) migProfiles(c *Container, g *GPU, out []int) ([]int, Code) {
	m := g.MIG
	want := migWant(c, g)
	if r.MIGProfile != "" {
		for i := range m.Profiles {
			if m.Profiles[i].Name == r.MIGProfile {
				if want > m.Profiles[i].MemoryMiB {
					return out, CodeMIGProfileSmall // refused, never capped at the profile's memory
				}
				return append(out, i), CodeOK
			}
		}
		return out, CodeMIGProfile
	}
	largest := -1
	for i := range m.Profiles {
		p := &m.Profiles[i]
		if strings.ContainsAny(p.Name, "+-") {
			continue // media-engine variants only when named
		}
		if largest < 0 || p.Slices > m.Profiles[largest].Slices || p.Slices == m.Profiles[largest].Slices && p.MemoryMiB > m.Profiles[largest].MemoryMiB {
			largest = i
		}
		if want > 0 && p.MemoryMiB >= want {
			out = append(out, i)
		}
	}
	if want == 0 && largest >= 0 {
		out = append(out, largest)
	}
	if len(out) == 0 {
		return out, CodeMIGProfile
	}
	slices.SortFunc(out, func(a, b int) int {
		pa, pb := &m.Profiles[a], &m.Profiles[b]
		if pa.MemoryMiB != pb.MemoryMiB {
			return int(pa.MemoryMiB - pb.MemoryMiB)
		}
		return pa.Slices - pb.Slices
	})
	return out, CodeOK
}

// migWant is the memory container c asks of an instance of GPU g in MiB: a
// percentage is of the GPU's memory; 0 for the whole GPU (no memory asked,
// or 100%).
func migWant(c *Container, g *GPU) int64 {
	switch {
	case c.MemoryPercent > 0 && c.MemoryPercent < 100:
		return g.MemoryMiB * int64(c.MemoryPercent) / 100
	case c.MemoryPercent == 0 && c.MemoryMiB > 0:
		return c.MemoryMiB
	}
	return 0
}

// migCap is the memory cap of container c on an instance of profile p of
// GPU g: its ask when smaller than the profile's memory (libvcuda caps it
// inside the instance), else the profile's.
func migCap(c *Container, g *GPU, p *api.MIGProfile) int64 {
	if want := migWant(c, g); want > 0 && want < p.MemoryMiB {
		return want
	}
	return p.MemoryMiB
}

// migUse is what a GPU's bookings hold: memory slices and instances per
// profile.
type migUse struct {
	held   uint32
	booked [api.MaxMIGProfiles]uint8
}

// migFree says whether profile pi may be created (or taken over) at pl on
// GPU g with u booked; the UUID of the instance taken over. A profile holds
// at most its instance count (one media-engine instance per GPU).
func migFree(g *GPU, pi int, pl api.MIGPlacement, u *migUse) (ok bool, instance string, reuse bool) {
	p := &g.MIG.Profiles[pi]
	mask := sliceMask(pl)
	if mask&u.held != 0 {
		return false, "", false
	}
	count := 0
	if pi < len(u.booked) {
		count = int(u.booked[pi])
	}
	blocked := false
	for _, in := range g.MIG.Instances {
		m := sliceMask(in.Placement)
		if in.Profile == p.Name && m&u.held == 0 {
			count++ // an instance nobody booked (booked ones are counted above)
		}
		if m&mask == 0 || blocked {
			continue
		}
		if in.Profile == p.Name && in.Placement == pl && !in.InUse {
			instance, reuse = in.UUID, true
			continue
		}
		blocked = true // another instance holds the slices
	}
	switch {
	case blocked:
		return false, "", false
	case reuse:
		return true, instance, true
	case g.MIG.Fixed || count >= p.Instances:
		return false, "", false
	}
	return true, "", false
}

// migRoom measures what GPU g has left with held booked: the compute slices
// of the largest profile still placeable and the number of free placements.
func migRoom(g *GPU, u *migUse) [2]int {
	var largest, free int
	for i := range g.MIG.Profiles {
		p := &g.MIG.Profiles[i]
		for _, pl := range p.Placements {
			if ok, _, _ := migFree(g, i, pl, u); ok {
				free++
				largest = max(largest, p.Slices)
			}
		}
	}
	return [2]int{largest, free}
}

// migCheck is the per-GPU predicate of a MIG ask: CodeOK and the best
// instance on GPU pos with u booked.
func (f *Fitter) migCheck(pos int, c *Container, u *migUse) (migCand, Code) {
	g := &f.node.GPUs[pos]
	if !g.Healthy {
		return migCand{}, CodeUnhealthy
	}
	if code := f.req.admits(g); code != CodeOK {
		return migCand{}, code
	}
	switch {
	case f.req.SpreadGroup && f.sib[pos] > 0:
		return migCand{}, CodeGroupShared
	case g.MIG == nil:
		return migCand{}, CodeMIGProfile
	}
	var code Code
	f.profs, code = f.req.migProfiles(c, g, f.profs[:0])
	if code != CodeOK {
		return migCand{}, code
	}
	occupied := u.held // binpack/spread: slices held by bookings and by instances in use
	for _, in := range g.MIG.Instances {
		if in.InUse {
			occupied |= sliceMask(in.Placement)
		}
	}
	for _, pi := range f.profs {
		p := &g.MIG.Profiles[pi]
		found := false
		var best migCand
		for _, pl := range p.Placements {
			ok, uuid, reuse := migFree(g, pi, pl, u)
			if !ok {
				continue
			}
			after := *u // as Apply books it: slices held, one more instance of the profile
			after.held |= sliceMask(pl)
			if pi < len(after.booked) {
				after.booked[pi]++
			}
			cand := migCand{pos: pos, profile: pi, place: pl, instance: uuid, reuse: reuse,
				held: bits.OnesCount32(occupied), room: migRoom(g, &after)}
			if !found || cand.better(&best, f.node.GPUs, f.req.policy()) {
				best, found = cand, true
			}
		}
		if found {
			return best, CodeOK
		}
	}
	return migCand{}, CodeMIGNoPlacement
}

// fitMIG places every GPU container of a MIG ask on its own MIG instance.
func (f *Fitter) fitMIG(req *Request, node *Node) (Placement, []Reason) {
	f.held = f.held[:0]
	for i := range node.GPUs {
		f.held = append(f.held, migUse{held: node.GPUs[i].MIGHeld, booked: node.GPUs[i].MIGBooked})
	}
	for i := range req.Containers {
		c := &req.Containers[i]
		if c.Number == 0 {
			continue
		}
		var best migCand
		found := false
		for pos := range node.GPUs {
			cand, code := f.migCheck(pos, c, &f.held[pos])
			if code == CodeOK && (!found || cand.better(&best, node.GPUs, req.policy())) {
				best, found = cand, true
			}
		}
		if !found {
			f.explainMIG(c)
			return Placement{}, f.reasons
		}
		g := &node.GPUs[best.pos]
		p := &g.MIG.Profiles[best.profile]
		f.held[best.pos].held |= sliceMask(best.place)
		if best.profile < api.MaxMIGProfiles {
			f.held[best.pos].booked[best.profile]++
		}
		f.devs = append(f.devs, Device{Pos: best.pos, UUID: g.UUID, MemoryMiB: migCap(c, g, p), Cores: migCores(g.MIG, p),
			MIG: api.MIGDevice{Profile: p.Name, Placement: best.place, UUID: best.instance}})
		f.conts[i].Devices = f.devs[len(f.devs)-1 : len(f.devs) : len(f.devs)]
	}
	return Placement{Node: node.Name, Containers: f.conts}, nil
}

// migCores is a profile's share of the GPU's compute, in percent: its
// compute slices over the largest profile's (3g of 7g: 42).
func migCores(m *MIG, p *api.MIGProfile) int {
	most := 0
	for i := range m.Profiles {
		most = max(most, m.Profiles[i].Slices)
	}
	if most == 0 {
		return 100
	}
	return min(100, 100*p.Slices/most)
}

// explainMIG records why container c gets no MIG instance: a reason per
// GPU, then the node-level summary.
func (f *Fitter) explainMIG(c *Container) {
	inMode, nSmall := 0, 0
	small := Reason{Code: CodeMIGProfileSmall, Container: c.Name, Detail: f.req.MIGProfile, Have: -1}
	for pos := range f.node.GPUs {
		g := &f.node.GPUs[pos]
		if g.mode() == api.ModeMIG {
			inMode++
		}
		_, code := f.migCheck(pos, c, &f.held[pos])
		r := Reason{Code: code, Container: c.Name, GPU: g.UUID, Model: g.Model}
		switch code {
		case CodeModeMismatch:
			r.Mode = g.mode()
		case CodeMIGProfile, CodeMIGNoPlacement:
			if g.MIG != nil {
				r.Detail = f.migAsk(c, g)
			}
		case CodeMIGProfileSmall:
			r.Detail, r.Want = f.req.MIGProfile, migWant(c, g)
			for _, p := range g.MIG.Profiles {
				if p.Name == f.req.MIGProfile {
					r.Have = p.MemoryMiB
				}
			}
			nSmall++
			small.Want, small.Have = max(small.Want, r.Want), max(small.Have, r.Have)
		}
		f.reasons = append(f.reasons, r)
	}
	node := Reason{Container: c.Name, Count: 1, Want: 1}
	switch {
	case inMode == 0:
		node.Code, node.Have, node.Mode = CodeTooFewInMode, 0, api.ModeMIG
	case nSmall == inMode:
		node = small // the named profile is too small everywhere it is offered
	default:
		node.Code, node.Have, node.Detail = CodeMIGNoFit, int64(inMode), f.migAsk(c, nil)
	}
	f.reasons = append(f.reasons, node)
}

// migAsk names what container c asks of GPU g (nil: of any GPU): the named
// profile, the profile its memory maps to there, or its memory.
func (f *Fitter) migAsk(c *Container, g *GPU) string {
	switch {
	case f.req.MIGProfile != "":
		return "a " + f.req.MIGProfile + " instance"
	case g != nil && g.MIG != nil:
		if profs, code := f.req.migProfiles(c, g, f.profs[:0]); code == CodeOK {
			return "a " + g.MIG.Profiles[profs[0]].Name + " instance or larger"
		}
	}
	switch {
	case c.MemoryPercent > 0 && c.MemoryPercent < 100:
		return "an instance with " + strconv.Itoa(c.MemoryPercent) + "% of the GPU's memory"
	case c.MemoryPercent == 0 && c.MemoryMiB > 0:
		return "an instance with " + strconv.FormatInt(c.MemoryMiB, 10) + " MiB"
	}
	return "a whole-GPU instance"
}
