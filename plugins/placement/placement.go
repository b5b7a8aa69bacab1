package placement

import (
	"fmt"

	"github.com/volcano-vgpu/volcano-vgpu/api"
)

// Placement is where one pod goes: Containers is aligned with
// Request.Containers (containers asking no GPU have no Devices).
type Placement struct {
	Node       string
	Containers []ContainerPlacement
}

// ContainerPlacement is the GPUs of one container.
type ContainerPlacement struct {
	Name        string
	Init        bool
	Restartable bool     // a sidecar: an init container that runs beside the app containers
	Devices     []Device // ascending position, distinct GPUs
}

// Device is one GPU share of a container.
type Device struct {
	Pos       int    // position in Node.GPUs; a hint, UUID is authoritative
	UUID      string //
	MemoryMiB int64
	Cores     int // 100: held exclusively
	// MIG: the MIG instance the container gets on a MIG GPU (its profile
	// and placement; the UUID of an existing instance it takes over); the
	// zero value for a share of the GPU.
	MIG api.MIGDevice
}

// Clone returns a deep copy that owns its memory.
func (p Placement) Clone() Placement {
	c := Placement{Node: p.Node, Containers: make([]ContainerPlacement, len(p.Containers))}
	for i, cp := range p.Containers {
		c.Containers[i] = ContainerPlacement{Name: cp.Name, Init: cp.Init, Restartable: cp.Restartable, Devices: append([]Device(nil), cp.Devices...)}
	}
	return c
}

// UUIDs lists the distinct GPUs of p.
func (p Placement) UUIDs() []string {
	var out []string
	for _, cp := range p.Containers {
		for _, d := range cp.Devices {
			if !containsString(out, d.UUID) {
				out = append(out, d.UUID)
			}
		}
	}
	return out
}

func containsString(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// footprint is what a pod holds on one GPU for its lifetime. App containers
// and sidecars (restartable init containers) run together and add up; a
// classic init container runs alone before them, beside only the sidecars
// declared before it. The pod needs the largest of these on each GPU
// (kube-scheduler's effective request rule, applied per GPU): memory and
// cores max(Σ app + Σ sidecars, max over init i of (init i + Σ sidecars
// before i)); tenants counted the same way; exclusive if any container holds
// it with 100 cores. Containers are taken in declaration order, as Fit and
// the assignment list them.
type footprint struct {
	mem   int64
	cores int
	share int
	excl  int
}

func (a footprint) plus(b footprint) footprint {
	return footprint{a.mem + b.mem, a.cores + b.cores, a.share + b.share, max(a.excl, b.excl)}
}

func (a footprint) atLeast(b footprint) footprint {
	return footprint{max(a.mem, b.mem), max(a.cores, b.cores), max(a.share, b.share), max(a.excl, b.excl)}
}

func footprintOf(p *Placement, uuid string) footprint {
	var app, init, side footprint
	for _, cp := range p.Containers {
		for _, d := range cp.Devices {
			if d.UUID != uuid {
				continue
			}
			one := footprint{mem: d.MemoryMiB, cores: d.Cores, share: 1}
			if d.Cores >= 100 {
				one.excl = 1
			}
			switch {
			case cp.Init && !cp.Restartable:
				init = init.atLeast(side.plus(one))
			case cp.Restartable:
				side = side.plus(one)
				app = app.plus(one)
			default:
				app = app.plus(one)
			}
		}
	}
	return app.atLeast(init)
}

// gpuRef is one distinct GPU of a placement, resolved on a node.
type gpuRef struct {
	pos  int
	uuid string
}

// refs resolves the distinct GPUs of p on node into buf. It allocates only
// for placements touching more than len(buf) GPUs, or on error.
func refs(node *Node, p *Placement, buf []gpuRef) ([]gpuRef, error) {
	if p.Node != "" && p.Node != node.Name {
		return nil, fmt.Errorf("%w: placement for %s applied to %s", ErrWrongNode, p.Node, node.Name)
	}
	out := buf[:0]
	for _, cp := range p.Containers {
	devices:
		for _, d := range cp.Devices {
			for _, r := range out {
				if r.uuid == d.UUID {
					continue devices
				}
			}
			pos := node.pos(d.UUID, d.Pos)
			if pos < 0 {
				return nil, fmt.Errorf("%w: %s on node %s", ErrUnknownGPU, d.UUID, node.Name)
			}
			out = append(out, gpuRef{pos, d.UUID})
		}
	}
	return out, nil
}

// Apply books p's footprint on node. It is all or nothing: on error node is
// unchanged. It never checks capacity, so usage rebuilt from existing pods is
// recorded even when it overcommits; Fit is what refuses overcommitting.
func Apply(node *Node, p Placement) error {
	var buf [16]gpuRef
	gpus, err := refs(node, &p, buf[:])
	if err != nil {
		return err
	}
	for _, r := range gpus {
		fp, g := footprintOf(&p, r.uuid), &node.GPUs[r.pos]
		g.UsedMemoryMiB += fp.mem
		g.UsedCores += fp.cores
		g.Shares += fp.share
		g.Exclusive += fp.excl
		g.MIGHeld |= migSlices(&p, r.uuid)
		forMIGProfiles(&p, g, r.uuid, func(i int) { g.MIGBooked[i]++ })
	}
	return nil
}

// Release is the exact inverse of Apply. It never takes usage below zero:
// if p was not booked on node it returns ErrUnderflow and changes nothing.
func Release(node *Node, p Placement) error {
	var buf [16]gpuRef
	gpus, err := refs(node, &p, buf[:])
	if err != nil {
		return err
	}
	for _, r := range gpus {
		fp, g := footprintOf(&p, r.uuid), &node.GPUs[r.pos]
		if g.UsedMemoryMiB < fp.mem || g.UsedCores < fp.cores || g.Shares < fp.share || g.Exclusive < fp.excl {
			return fmt.Errorf("%w: %s on node %s holds %d MiB, %d%% cores, %d tenants, %d exclusive; release asks %d MiB, %d%%, %d, %d",
				ErrUnderflow, r.uuid, node.Name, g.UsedMemoryMiB, g.UsedCores, g.Shares, g.Exclusive, fp.mem, fp.cores, fp.share, fp.excl)
		}
		if s := migSlices(&p, r.uuid); g.MIGHeld&s != s {
			return fmt.Errorf("%w: %s on node %s holds MIG memory slices %b; release asks %b", ErrUnderflow, r.uuid, node.Name, g.MIGHeld, s)
		}
		var asked [api.MaxMIGProfiles]uint8
		forMIGProfiles(&p, g, r.uuid, func(i int) { asked[i]++ })
		for i, n := range asked {
			if g.MIGBooked[i] < n {
				return fmt.Errorf("%w: %s on node %s holds %d instances of MIG profile %s; release asks %d", ErrUnderflow, r.uuid, node.Name, g.MIGBooked[i], g.MIG.Profiles[i].Name, n)
			}
		}
	}
	for _, r := range gpus {
		fp, g := footprintOf(&p, r.uuid), &node.GPUs[r.pos]
		g.UsedMemoryMiB -= fp.mem
		g.UsedCores -= fp.cores
		g.Shares -= fp.share
		g.Exclusive -= fp.excl
		g.MIGHeld &^= migSlices(&p, r.uuid)
		forMIGProfiles(&p, g, r.uuid, func(i int) { g.MIGBooked[i]-- })
	}
	return nil
}

// forMIGProfiles calls f with the profile index (in g.MIG.Profiles) of
// each of p's MIG instances on GPU uuid (g); an instance of a profile the
// GPU no longer publishes is skipped.
func forMIGProfiles(p *Placement, g *GPU, uuid string, f func(int)) {
	if g.MIG == nil {
		return
	}
	for _, cp := range p.Containers {
		for _, d := range cp.Devices {
			if d.UUID != uuid || d.MIG.Profile == "" {
				continue
			}
			for i := range g.MIG.Profiles {
				if g.MIG.Profiles[i].Name == d.MIG.Profile && i < api.MaxMIGProfiles {
					f(i)
				}
			}
		}
	}
}

// migSlices is the memory slices p's MIG instances hold on GPU uuid.
func migSlices(p *Placement, uuid string) uint32 {
	var m uint32
	for _, cp := range p.Containers {
		for _, d := range cp.Devices {
			if d.UUID == uuid && d.MIG.Profile != "" {
				m |= sliceMask(d.MIG.Placement)
			}
		}
	}
	return m
}
