package plugin

import (
	"io"
	"os"
	"path/filepath"
	"syscall"

	"github.com/volcano-vgpu/volcano-vgpu/api"
	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/compute"
	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/metrics"
	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/usage"
	"github.com/volcano-vgpu/volcano-vgpu/plugins/placement"
)

// observe hands the compute controller's decisions to the usage tracker.
func (p *Plugin) observe(o compute.Observation) {
	samples := make([]usage.Sample, len(o.Decisions))
	for i, d := range o.Decisions {
		samples[i] = usage.Sample{Key: d.Key, Target: d.Share, Measured: d.Measured, Limited: d.Control.Mode == api.ControlLimited}
	}
	p.usage.Observe(o.UUID, o.Busy, samples)
}

// snapshot feeds the metrics: the inventory and the allocation records
// (under the lock), then what each container reports and the compute
// controller measured (files read after it). Tenants of containers no longer
// allocated are dropped from the usage tracker here, so their series go.
func (p *Plugin) snapshot() metrics.Snapshot {
	inv := p.Inventory()
	s := metrics.Snapshot{Health: p.healthSnapshot()}
	idx := map[string]int{}
	core := make([]placement.GPU, len(inv.GPUs))
	for i, g := range inv.GPUs {
		idx[g.UUID] = i
		s.GPUs = append(s.GPUs, metrics.GPU{UUID: g.UUID, Model: g.Model, Index: g.Index, Healthy: g.Healthy, MemoryMiB: g.MemoryMiB, MaxShares: g.MaxShares, Mode: g.SharingMode()})
		core[i] = placement.GPU{UUID: g.UUID, MemoryMiB: g.MemoryMiB, MaxShares: g.MaxShares}
	}
	type source struct {
		shared, key string
		dev, n      int // position in the container's limiter config, devices there
	}
	var sources []source
	p.mu.Lock()
	for i := range s.GPUs {
		if s.GPUs[i].Mode == api.ModeMPS {
			s.GPUs[i].MPS = p.mpsMetricsLocked(s.GPUs[i].UUID)
		}
	}
	for _, recs := range p.records {
		for _, r := range recs {
			paths, perr := p.store.Paths(r.PodUID, r.Container)
			for j, d := range r.Devices {
				c := metrics.Container{Namespace: r.Namespace, Pod: r.Name, Container: r.Container, UUID: d.UUID, Index: -1,
					MemoryMiB: d.MemoryMiB, Cores: d.Cores, Policy: r.ComputePolicy}
				if i, ok := idx[d.UUID]; ok {
					g := &s.GPUs[i]
					g.AllocatedMemoryMiB += d.MemoryMiB
					g.AllocatedCores += d.Cores
					g.Shares++
					c.Index, c.Model = g.Index, g.Model
					if g.Mode == api.ModeMPS { // what Allocate handed it (addMPS)
						c.MPSThreads, c.MPSPinnedMiB = mpsThreads(d.Cores), d.MemoryMiB
					}
					core[i].UsedMemoryMiB += d.MemoryMiB
					core[i].UsedCores += d.Cores
					core[i].Shares++
					if d.Cores >= 100 {
						core[i].Exclusive++
					}
				}
				s.Containers = append(s.Containers, c)
				src := source{key: reportKey(r), dev: j, n: len(r.Devices)}
				if perr == nil {
					src.shared = paths.Shared
				}
				sources = append(sources, src)
			}
		}
	}
	s.Unlimited = p.unlimitedLocked()
	published := p.published
	p.mu.Unlock()
	if published != nil {
		s.InventoryPublished = published()
	}

	live := map[[2]string]bool{}
	files := map[string]containerFiles{}
	for k := range s.Containers {
		c, src := &s.Containers[k], sources[k]
		live[[2]string{c.UUID, src.key}], live[[2]string{c.UUID, ""}] = true, true
		if t, ok := p.usage.Tenant(c.UUID, src.key); ok {
			c.Compute = &t
		}
		if src.shared == "" {
			continue
		}
		f, ok := files[src.shared]
		if !ok {
			f = readContainerFiles(src.shared, src.n)
			files[src.shared] = f
		}
		if f.used != nil {
			u := f.used[src.dev]
			if i, ok := idx[c.UUID]; ok {
				u = min(u, uint64(inv.GPUs[i].MemoryMiB)<<20) // a container's claim, never more than the GPU
				s.GPUs[i].UsedMemoryBytes += u
			}
			c.MemoryUsed = &u
		}
		if f.report != nil {
			r := api.ReadUsage(f.report, src.dev)
			c.Report = &r
		}
	}
	for i := range s.GPUs {
		s.GPUs[i].StrandedMiB = core[i].StrandedMiB()
		if g, ok := p.usage.GPU(s.GPUs[i].UUID); ok {
			s.GPUs[i].Compute = &g
		}
	}
	p.usage.Keep(func(uuid, tenant string) bool { return live[[2]string{uuid, tenant}] })
	return s
}

// containerFiles are a container's own reports: the memory its region
// books per device and its usage report (nil when unreadable: no process
// started yet, or a file the container garbled).
type containerFiles struct {
	used   []uint64
	report []byte
}

func readContainerFiles(shared string, n int) containerFiles {
	var f containerFiles
	if b, err := readHead(filepath.Join(shared, api.RegionFile), api.RegionHeadSize); err == nil {
		f.used, _ = api.RegionUsed(b, n)
	}
	if b, err := readHead(filepath.Join(shared, api.UsageFile), api.UsageFileSize); err == nil && api.CheckUsage(b, n) == nil {
		f.report = b
	}
	return f
}

// readHead reads the first n bytes of path, refusing anything but a regular
// file (the container owns the directory: it could leave a FIFO or a link).
func readHead(path string, n int) ([]byte, error) {
	file, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer file.Close()
	st, err := file.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, os.ErrInvalid
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(file, b); err != nil {
		return nil, err
	}
	return b, nil
}
