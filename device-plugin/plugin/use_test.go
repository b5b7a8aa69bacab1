package plugin

import (
	"context"
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"

	"github.com/volcano-vgpu/volcano-vgpu/api"
	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/compute"
)

// writeRegion writes a shared region header booking used bytes per device.
func writeRegion(t *testing.T, dir string, used ...uint64) {
	t.Helper()
	b := make([]byte, api.RegionSize)
	le := binary.LittleEndian
	le.PutUint32(b, api.RegionMagic)
	le.PutUint32(b[4:], api.RegionVersion)
	le.PutUint32(b[8:], api.RegionSize)
	le.PutUint32(b[12:], uint32(len(used)))
	for i, u := range used {
		le.PutUint64(b[64+i*320:], u)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, api.RegionFile), b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestSnapshotUse: the metrics snapshot carries what each container's region
// books (a claim beyond the GPU clamped to it), what the compute controller
// measured, and the memory the bookings strand; a deleted pod's tenants leave
// the usage tracker.
func TestSnapshotUse(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	p1 := pod("p1").app("main", shareSpec{gpu: 1, mem: 8192, cores: 100}).obj(t, e)
	p2 := pod("p2").app("main", shareSpec{gpu: 2, mem: 4096, cores: 25}).obj(t, e)
	e.add(t, p1, p2)
	e.kubelet.set("p1", map[string][]string{"main": nil})
	if _, err := e.p.Allocate(ctx, []string{e.id(1, 0)}); err != nil {
		t.Fatal(err)
	}
	e.kubelet.set("p2", map[string][]string{"main": nil})
	if _, err := e.p.Allocate(ctx, []string{e.id(2, 0)}); err != nil {
		t.Fatal(err)
	}
	paths1, _ := e.p.store.Paths("uid-p1", "main")
	paths2, _ := e.p.store.Paths("uid-p2", "main")
	writeRegion(t, paths1.Shared, 3<<30) // 3 GiB booked
	writeRegion(t, paths2.Shared, 1<<50) // a lie: more than any GPU has
	e.p.observe(compute.Observation{UUID: e.gpu(1), Busy: 0.5, Decisions: []compute.Decision{{Key: "uid-p1/main", Share: 1, Measured: 0.5}}})

	s := e.p.snapshot()
	byPod := map[string]int{}
	for i, c := range s.Containers {
		byPod[c.Pod] = i
	}
	c1, c2 := s.Containers[byPod["p1"]], s.Containers[byPod["p2"]]
	if c1.MemoryUsed == nil || *c1.MemoryUsed != 3<<30 || c1.Model == "" || c1.Index != e.node.GPUs[1].Index {
		t.Errorf("p1: used %v, model %q, index %d; want 3 GiB on GPU 1 with its model", c1.MemoryUsed, c1.Model, c1.Index)
	}
	gpu2 := uint64(e.node.GPUs[2].MemoryMiB) << 20
	if c2.MemoryUsed == nil || *c2.MemoryUsed != gpu2 {
		t.Errorf("p2 claims 1 PiB: used %v, want it clamped to its GPU's %d bytes", c2.MemoryUsed, gpu2)
	}
	if c1.Compute == nil || c1.Compute.Achieved != 0.5 || c2.Compute != nil {
		t.Errorf("compute: p1 %+v, p2 %+v; want p1 at 0.5 and nothing measured for p2", c1.Compute, c2.Compute)
	}
	for _, g := range s.GPUs {
		switch g.UUID {
		case e.gpu(1): // held with 100 cores: all its free memory is stranded
			if want := g.MemoryMiB - 8192; g.StrandedMiB != want || g.UsedMemoryBytes != 3<<30 || g.Compute == nil {
				t.Errorf("GPU 1: stranded %d MiB, used %d, compute %v; want %d MiB, 3 GiB, measured", g.StrandedMiB, g.UsedMemoryBytes, g.Compute, want)
			}
		case e.gpu(2): // one 25% tenant of 4 GiB: more tenants like it fit, nothing stranded unless the slots run out
			if g.UsedMemoryBytes != gpu2 {
				t.Errorf("GPU 2: used %d, want the clamped %d", g.UsedMemoryBytes, gpu2)
			}
		}
	}
	e.p.deletePod("uid-p1")
	e.p.snapshot()
	if _, ok := e.p.usage.Tenant(e.gpu(1), "uid-p1/main"); ok {
		t.Error("the deleted pod's tenant is still tracked")
	}
}

// writeUsage writes a one-device usage report (vcuda_control.h's layout).
func writeUsage(t *testing.T, dir string, launched, waits uint64) {
	t.Helper()
	b := make([]byte, api.UsageFileSize)
	le := binary.LittleEndian
	le.PutUint32(b, api.UsageMagic)
	le.PutUint32(b[4:], api.UsageVersion)
	le.PutUint32(b[8:], api.UsageFileSize)
	le.PutUint32(b[12:], 1)
	le.PutUint64(b[64:], launched)
	le.PutUint64(b[72:], waits)
	if err := api.CheckUsage(b, 1); err != nil {
		t.Fatal(err)
	}
	if got := api.ReadUsage(b, 0); got.Launched != launched || got.Waits != waits {
		t.Fatalf("usage report layout: read back %+v", got)
	}
	if err := os.WriteFile(filepath.Join(dir, api.UsageFile), b, 0o644); err != nil {
		t.Fatal(err)
	}
}
