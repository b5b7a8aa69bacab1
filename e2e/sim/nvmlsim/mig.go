package nvmlsim

import (
	"fmt"
	"slices"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"

	"github.com/volcano-vgpu/volcano-vgpu/e2e/sim/migtable"
)

// MIG of the simulated GPUs, as NVML answers it (NVML API reference and
// NVIDIA's MIG user guide):
//   - a model with no MIG table (migtable) answers ERROR_NOT_SUPPORTED to
//     GetMigMode; a MIG-capable GPU whose mode is off answers
//     ERROR_NOT_SUPPORTED to every GPU instance call;
//   - GetGpuInstanceProfileInfo takes the NVML profile constant and reports
//     the profile ID nvidia-smi prints (19 for 1g.5gb); placements are those
//     of the published tables;
//   - CreateGpuInstanceWithPlacement refuses a placement that is not one of
//     the profile's (ERROR_INVALID_ARGUMENT) and one that overlaps an
//     existing instance or exceeds the profile's instance count
//     (ERROR_INSUFFICIENT_RESOURCES);
//   - a GPU instance with a compute instance, or a compute instance with
//     processes, is not destroyed (ERROR_IN_USE);
//   - GetMigDeviceHandleByIndex walks the MIG devices (one per compute
//     instance) in GPU instance order; ERROR_NOT_FOUND past the last.
//
// Simplifications, none of which the device plugin relies on: a GPU
// instance holds at most one compute instance, and it spans the whole GPU
// instance (the only kind the device plugin creates; a smaller one is
// ERROR_NOT_SUPPORTED); GPU instance IDs are the lowest free from 1 (real
// NVML derives them from the placement); MIG mode is set by the
// configuration only (SetMigMode is not simulated: machines' MIG settings
// are left as they are).

// migGPU is the MIG state of one GPU.
type migGPU struct {
	table   migtable.Table
	enabled bool
	// failCreate: the next GPU instance create answers this (FailMIGCreate;
	// SUCCESS: none pending).
	failCreate nvml.Return
	gis        []*gpuInstance // by ID
	created    int            // compute instances ever created, for fresh MIG UUIDs
}

type gpuInstance struct {
	id      int
	profile migtable.Profile
	place   migtable.Placement
	handle  *mock.GpuInstance
	ci      *computeInstance // nil: none yet
}

type computeInstance struct {
	handle *mock.ComputeInstance
	dev    *mock.Device // the MIG device
	uuid   string
	procs  []nvml.ProcessInfo
}

// newMIG returns the MIG state of GPU i; nil for a model with no table.
func (s *Sim) newMIG(i int) *migGPU {
	g := s.node.GPUs[i]
	t, ok := migtable.ForModel(g.Model)
	if !ok {
		return nil
	}
	return &migGPU{table: t, enabled: g.MIG}
}

// gpuInstanceRet answers the checks every GPU instance call of GPU i
// starts with; SUCCESS and the GPU's MIG state when it may go on. Call
// with s.mu held.
func (s *Sim) gpuInstanceRet(i int) (*migGPU, nvml.Return) {
	switch m := s.mig[i]; {
	case s.lost[i]:
		return nil, nvml.ERROR_GPU_IS_LOST
	case m == nil || !m.enabled:
		return nil, nvml.ERROR_NOT_SUPPORTED
	default:
		return m, nvml.SUCCESS
	}
}

func profileInfo(p migtable.Profile) nvml.GpuInstanceProfileInfo {
	media := uint32(0)
	if p.Media {
		media = 1
	}
	return nvml.GpuInstanceProfileInfo{
		Id: p.ID, SliceCount: uint32(p.Slices), InstanceCount: uint32(p.Instances), MultiprocessorCount: uint32(p.SMs),
		CopyEngineCount: uint32(p.Slices), DecoderCount: uint32(max(p.Slices/2, 1)), JpegCount: media, OfaCount: media,
		MemorySizeMB: uint64(p.MemoryMiB),
	}
}

// addMIG fills in the MIG methods of GPU i's handle d.
func (s *Sim) addMIG(i int, d *mock.Device) {
	d.GetMigModeFunc = func() (int, int, nvml.Return) {
		s.mu.Lock()
		defer s.mu.Unlock()
		switch m := s.mig[i]; {
		case s.lost[i]:
			return 0, 0, nvml.ERROR_GPU_IS_LOST
		case m == nil:
			return 0, 0, nvml.ERROR_NOT_SUPPORTED
		case m.enabled:
			return nvml.DEVICE_MIG_ENABLE, nvml.DEVICE_MIG_ENABLE, nvml.SUCCESS
		default:
			return nvml.DEVICE_MIG_DISABLE, nvml.DEVICE_MIG_DISABLE, nvml.SUCCESS
		}
	}
	d.IsMigDeviceHandleFunc = func() (bool, nvml.Return) { return false, nvml.SUCCESS }
	d.GetGpuInstanceProfileInfoFunc = func(profile int) (nvml.GpuInstanceProfileInfo, nvml.Return) {
		s.mu.Lock()
		defer s.mu.Unlock()
		m, ret := s.gpuInstanceRet(i)
		if ret != nvml.SUCCESS {
			return nvml.GpuInstanceProfileInfo{}, ret
		}
		if profile < 0 || profile >= nvml.GPU_INSTANCE_PROFILE_COUNT {
			return nvml.GpuInstanceProfileInfo{}, nvml.ERROR_INVALID_ARGUMENT
		}
		p, ok := m.table.ByNVML(profile)
		if !ok {
			return nvml.GpuInstanceProfileInfo{}, nvml.ERROR_NOT_SUPPORTED
		}
		return profileInfo(p), nvml.SUCCESS
	}
	d.GetGpuInstancePossiblePlacementsFunc = func(info *nvml.GpuInstanceProfileInfo) ([]nvml.GpuInstancePlacement, nvml.Return) {
		s.mu.Lock()
		defer s.mu.Unlock()
		p, ret := s.profileOf(i, info)
		if ret != nvml.SUCCESS {
			return nil, ret
		}
		out := make([]nvml.GpuInstancePlacement, len(p.Placements))
		for k, pl := range p.Placements {
			out[k] = nvml.GpuInstancePlacement{Start: uint32(pl.Start), Size: uint32(pl.Size)}
		}
		return out, nvml.SUCCESS
	}
	d.CreateGpuInstanceWithPlacementFunc = func(info *nvml.GpuInstanceProfileInfo, placement *nvml.GpuInstancePlacement) (nvml.GpuInstance, nvml.Return) {
		s.mu.Lock()
		defer s.mu.Unlock()
		p, ret := s.profileOf(i, info)
		if ret != nvml.SUCCESS {
			return nil, ret
		}
		if placement == nil {
			return nil, nvml.ERROR_INVALID_ARGUMENT
		}
		pl := migtable.Placement{Start: int(placement.Start), Size: int(placement.Size)}
		if ret := s.createRet(i, p, pl); ret != nvml.SUCCESS {
			return nil, ret
		}
		if ret := s.mig[i].failCreate; ret != nvml.SUCCESS {
			s.mig[i].failCreate = nvml.SUCCESS
			return nil, ret
		}
		gi := s.createGPUInstance(i, d, p, pl, 0)
		return gi.handle, s.savedRet()
	}
	d.GetGpuInstancesFunc = func(info *nvml.GpuInstanceProfileInfo) ([]nvml.GpuInstance, nvml.Return) {
		s.mu.Lock()
		defer s.mu.Unlock()
		p, ret := s.profileOf(i, info)
		if ret != nvml.SUCCESS {
			return nil, ret
		}
		var out []nvml.GpuInstance
		for _, gi := range s.mig[i].gis {
			if gi.profile.ID == p.ID {
				out = append(out, gi.handle)
			}
		}
		return out, nvml.SUCCESS
	}
	d.GetGpuInstanceByIdFunc = func(id int) (nvml.GpuInstance, nvml.Return) {
		s.mu.Lock()
		defer s.mu.Unlock()
		m, ret := s.gpuInstanceRet(i)
		if ret != nvml.SUCCESS {
			return nil, ret
		}
		for _, gi := range m.gis {
			if gi.id == id {
				return gi.handle, nvml.SUCCESS
			}
		}
		return nil, nvml.ERROR_NOT_FOUND
	}
	d.GetMaxMigDeviceCountFunc = func() (int, nvml.Return) {
		s.mu.Lock()
		defer s.mu.Unlock()
		switch m := s.mig[i]; {
		case s.lost[i]:
			return 0, nvml.ERROR_GPU_IS_LOST
		case m == nil:
			return 0, nvml.ERROR_NOT_SUPPORTED
		default:
			return m.table.MemorySlices - 1, nvml.SUCCESS // 7 on an A100/H100
		}
	}
	d.GetMigDeviceHandleByIndexFunc = func(index int) (nvml.Device, nvml.Return) {
		s.mu.Lock()
		defer s.mu.Unlock()
		m, ret := s.gpuInstanceRet(i)
		if ret != nvml.SUCCESS {
			return nil, ret
		}
		if index < 0 || index >= m.table.MemorySlices-1 {
			return nil, nvml.ERROR_INVALID_ARGUMENT
		}
		k := 0
		for _, gi := range m.gis {
			if gi.ci == nil {
				continue
			}
			if k == index {
				return gi.ci.dev, nvml.SUCCESS
			}
			k++
		}
		return nil, nvml.ERROR_NOT_FOUND
	}
}

// profileOf checks the profile info a caller passes back (by its ID, as
// NVML reads it). Call with s.mu held.
func (s *Sim) profileOf(i int, info *nvml.GpuInstanceProfileInfo) (migtable.Profile, nvml.Return) {
	m, ret := s.gpuInstanceRet(i)
	if ret != nvml.SUCCESS {
		return migtable.Profile{}, ret
	}
	if info == nil {
		return migtable.Profile{}, nvml.ERROR_INVALID_ARGUMENT
	}
	p, ok := m.table.ByID(info.Id)
	if !ok {
		return migtable.Profile{}, nvml.ERROR_INVALID_ARGUMENT
	}
	return p, nvml.SUCCESS
}

// createRet says whether a p instance can be created at pl on GPU i. Call
// with s.mu held.
func (s *Sim) createRet(i int, p migtable.Profile, pl migtable.Placement) nvml.Return {
	if !slices.Contains(p.Placements, pl) {
		return nvml.ERROR_INVALID_ARGUMENT
	}
	same := 0
	for _, gi := range s.mig[i].gis {
		if gi.place.Start < pl.Start+pl.Size && pl.Start < gi.place.Start+gi.place.Size {
			return nvml.ERROR_INSUFFICIENT_RESOURCES
		}
		if gi.profile.ID == p.ID {
			same++
		}
	}
	if same >= p.Instances {
		return nvml.ERROR_INSUFFICIENT_RESOURCES
	}
	return nvml.SUCCESS
}

// createGPUInstance records a new GPU instance of GPU i (parent handle d)
// with ID id (0: the lowest free). Call with s.mu held, after createRet
// said SUCCESS.
func (s *Sim) createGPUInstance(i int, d *mock.Device, p migtable.Profile, pl migtable.Placement, id int) *gpuInstance {
	m := s.mig[i]
	if id == 0 {
		id = 1
		for slices.ContainsFunc(m.gis, func(gi *gpuInstance) bool { return gi.id == id }) {
			id++
		}
	}
	gi := &gpuInstance{id: id, profile: p, place: pl, handle: &mock.GpuInstance{}}
	info := nvml.GpuInstanceInfo{Device: d, Id: uint32(id), ProfileId: p.ID,
		Placement: nvml.GpuInstancePlacement{Start: uint32(pl.Start), Size: uint32(pl.Size)}}
	gi.handle.GetInfoFunc = func() (nvml.GpuInstanceInfo, nvml.Return) {
		s.mu.Lock()
		defer s.mu.Unlock()
		if ret := s.liveGI(i, gi); ret != nvml.SUCCESS {
			return nvml.GpuInstanceInfo{}, ret
		}
		return info, nvml.SUCCESS
	}
	gi.handle.DestroyFunc = func() nvml.Return {
		s.mu.Lock()
		defer s.mu.Unlock()
		if ret := s.liveGI(i, gi); ret != nvml.SUCCESS {
			return ret
		}
		if gi.ci != nil {
			return nvml.ERROR_IN_USE
		}
		m.gis = slices.DeleteFunc(m.gis, func(x *gpuInstance) bool { return x == gi })
		return s.savedRet()
	}
	s.addComputeInstances(i, d, gi)
	m.gis = append(m.gis, gi)
	slices.SortFunc(m.gis, func(a, b *gpuInstance) int { return a.id - b.id })
	return gi
}

// liveGI: gi still exists on a GPU that answers. Call with s.mu held.
func (s *Sim) liveGI(i int, gi *gpuInstance) nvml.Return {
	if s.lost[i] {
		return nvml.ERROR_GPU_IS_LOST
	}
	if !slices.Contains(s.mig[i].gis, gi) {
		return nvml.ERROR_INVALID_ARGUMENT // a destroyed instance's handle
	}
	return nvml.SUCCESS
}

// FailMIGCreate makes the next GPU instance create on GPU uuid fail with
// NVML's ERROR_INSUFFICIENT_RESOURCES, as the driver answers when it cannot
// make the instance (once; the one after it is served).
func (s *Sim) FailMIGCreate(uuid string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	i := s.index(uuid)
	if i < 0 || s.mig[i] == nil || !s.mig[i].enabled {
		return fmt.Errorf("simulated node %s has no GPU %q in MIG mode", s.node.Name, uuid)
	}
	s.mig[i].failCreate = nvml.ERROR_INSUFFICIENT_RESOURCES
	return nil
}
