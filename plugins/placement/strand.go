package placement

// Stranded memory. A shared GPU's memory is only useful while the GPU has
// cores and tenant slots left to go with it: an 80 GiB GPU whose tenants hold
// 12 GiB with 30% of the cores each has 10% of its cores left after three of
// them, for 44 GiB of memory. The binpack policies prefer placements that
// strand the least memory, then the fullest GPU and node (see binpackGPU and
// Fitter.ScoreNode); spread ignores it, since it leaves room on purpose.

// strandedMiB estimates the free memory of a GPU of capMiB and limit tenants,
// holding u, that later tenants could not use: the cores or tenant slots run
// out first when later tenants ask memory, cores and slots in the proportions
// its present tenants do. An idle GPU strands nothing; a GPU with no cores or
// slots left, or held exclusively, strands all its free memory.
func strandedMiB(capMiB int64, limit int, u usage) int64 {
	free := capMiB - u.mem
	if u.shares == 0 || u.mem <= 0 || free <= 0 {
		return 0
	}
	if u.excl > 0 || u.cores >= 100 || u.shares >= limit {
		return free
	}
	usable := int64(limit-u.shares) * u.mem / int64(u.shares)
	if u.cores > 0 {
		usable = min(usable, int64(100-u.cores)*u.mem/int64(u.cores))
	}
	return max(free-usable, 0)
}

// strandsMiB is how much more memory g strands once a tenant asking mem MiB
// and cores percent joins usage u (negative: the tenant evens the GPU out).
func strandsMiB(g *GPU, u usage, mem int64, cores int) int64 {
	after := u
	after.add(mem, cores)
	limit := g.ShareLimit()
	return strandedMiB(g.MemoryMiB, limit, after) - strandedMiB(g.MemoryMiB, limit, u)
}

// gpuUsage is g's usage as booked.
func gpuUsage(g *GPU) usage {
	return usage{mem: g.UsedMemoryMiB, cores: g.UsedCores, shares: g.Shares, excl: g.Exclusive}
}

// placementStrandsMiB is how much more memory the GPUs p uses on node strand
// in after (node with p applied) than in node.
func placementStrandsMiB(node, after *Node, p *Placement) int64 {
	var seen uint64
	var d int64
	for _, cp := range p.Containers {
		for _, dev := range cp.Devices {
			pos := node.pos(dev.UUID, dev.Pos)
			if pos < 0 || pos >= len(after.GPUs) || seen&(1<<pos) != 0 {
				continue
			}
			seen |= 1 << pos
			g, a := &node.GPUs[pos], &after.GPUs[pos]
			limit := g.ShareLimit()
			d += strandedMiB(a.MemoryMiB, limit, gpuUsage(a)) - strandedMiB(g.MemoryMiB, limit, gpuUsage(g))
		}
	}
	return d
}

// largeScaleMiB is the GPU memory at which largeGPUs is 1/2.
const largeScaleMiB = 32 << 10

// largeGPUs rates the size of the GPUs p takes on node in [0,1): the mean of
// m/(m+largeScaleMiB) over them, m their memory (24 GiB: 0.43, 80 GiB: 0.71).
func largeGPUs(node *Node, p *Placement) float64 {
	var sum float64
	n := 0
	for _, cp := range p.Containers {
		for _, d := range cp.Devices {
			pos := node.pos(d.UUID, d.Pos)
			if pos < 0 {
				continue
			}
			m := float64(max(node.GPUs[pos].MemoryMiB, 0))
			sum += m / (m + largeScaleMiB)
			n++
		}
	}
	if n == 0 {
		return 0
	}
	return sum / float64(n)
}

// StrandedMiB is the free memory of g, as booked, that later tenants could
// not use (see strandedMiB): the device plugin exports it per GPU.
func (g *GPU) StrandedMiB() int64 { return strandedMiB(g.MemoryMiB, g.ShareLimit(), gpuUsage(g)) }
