package placement

import "fmt"

// Placement is where one pod goes: Containers is aligned with
// Request.Containers (containers asking no GPU have no Devices).
type Placement struct {
	Node       string
	Containers []ContainerPlacement
}

// ContainerPlacement is the GPUs of one container.
type ContainerPlacement struct {
	Name    string
	Init    bool
	Devices []Device // ascending position, distinct GPUs
}

// Device is one GPU share of a container.
type Device struct {
	Pos       int    // position in Node.GPUs; a hint, UUID is authoritative
	UUID      string //
	MemoryMiB int64
	Cores     int // 100: held exclusively
}

// Clone returns a deep copy that owns its memory.
func (p Placement) Clone() Placement {
	c := Placement{Node: p.Node, Containers: make([]ContainerPlacement, len(p.Containers))}
	for i, cp := range p.Containers {
		c.Containers[i] = ContainerPlacement{Name: cp.Name, Init: cp.Init, Devices: append([]Device(nil), cp.Devices...)}
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
// run together and add up; init containers run one at a time, before them, so
// the pod needs the larger of the two on each GPU (kube-scheduler's effective
// request rule, applied per GPU): memory and cores max(Σ app, max init);
// tenants max(app containers on it, 1 if an init container uses it);
// exclusive if any container holds it with 100 cores.
type footprint struct {
	mem   int64
	cores int
	share int
	excl  int
}

func footprintOf(p *Placement, uuid string) footprint {
	var app, init footprint
	for _, cp := range p.Containers {
		for _, d := range cp.Devices {
			if d.UUID != uuid {
				continue
			}
			excl := 0
			if d.Cores >= 100 {
				excl = 1
			}
			if cp.Init {
				init = footprint{max(init.mem, d.MemoryMiB), max(init.cores, d.Cores), 1, max(init.excl, excl)}
				continue
			}
			app = footprint{app.mem + d.MemoryMiB, app.cores + d.Cores, app.share + 1, max(app.excl, excl)}
		}
	}
	return footprint{max(app.mem, init.mem), max(app.cores, init.cores), max(app.share, init.share), max(app.excl, init.excl)}
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
	}
	for _, r := range gpus {
		fp, g := footprintOf(&p, r.uuid), &node.GPUs[r.pos]
		g.UsedMemoryMiB -= fp.mem
		g.UsedCores -= fp.cores
		g.Shares -= fp.share
		g.Exclusive -= fp.excl
	}
	return nil
}
