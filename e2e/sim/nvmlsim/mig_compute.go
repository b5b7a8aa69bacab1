package nvmlsim

// The compute instances of the simulated GPU instances (one spanning each
// GPU instance, see mig.go) and their MIG devices, with the processes that
// run on them.

import (
	"crypto/sha256"
	"fmt"
	"slices"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
)

// ciProfiles maps NVML's compute instance profile constants to their
// compute slices.
func ciProfiles() map[int]int {
	return map[int]int{
		nvml.COMPUTE_INSTANCE_PROFILE_1_SLICE: 1, nvml.COMPUTE_INSTANCE_PROFILE_2_SLICE: 2,
		nvml.COMPUTE_INSTANCE_PROFILE_3_SLICE: 3, nvml.COMPUTE_INSTANCE_PROFILE_4_SLICE: 4,
		nvml.COMPUTE_INSTANCE_PROFILE_7_SLICE: 7,
	}
}

// ciCallRet is the answer to a compute instance call on gi with a profile:
// SUCCESS when gi lives and the profile is given. Call with s.mu held.
func (s *Sim) ciCallRet(i int, gi *gpuInstance, info *nvml.ComputeInstanceProfileInfo) nvml.Return {
	if ret := s.liveGI(i, gi); ret != nvml.SUCCESS {
		return ret
	}
	if info == nil {
		return nvml.ERROR_INVALID_ARGUMENT
	}
	return nvml.SUCCESS
}

// addComputeInstances fills in the compute instance methods of gi.
func (s *Sim) addComputeInstances(i int, d *mock.Device, gi *gpuInstance) {
	gi.handle.GetComputeInstanceProfileInfoFunc = func(profile, engine int) (nvml.ComputeInstanceProfileInfo, nvml.Return) {
		s.mu.Lock()
		defer s.mu.Unlock()
		if ret := s.liveGI(i, gi); ret != nvml.SUCCESS {
			return nvml.ComputeInstanceProfileInfo{}, ret
		}
		slices, ok := ciProfiles()[profile]
		switch {
		case !ok || engine != nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED:
			return nvml.ComputeInstanceProfileInfo{}, nvml.ERROR_INVALID_ARGUMENT
		case slices > gi.profile.Slices:
			return nvml.ComputeInstanceProfileInfo{}, nvml.ERROR_NOT_SUPPORTED
		}
		return nvml.ComputeInstanceProfileInfo{Id: uint32(profile), SliceCount: uint32(slices),
			InstanceCount: uint32(gi.profile.Slices / slices), MultiprocessorCount: uint32(gi.profile.SMs * slices / gi.profile.Slices)}, nvml.SUCCESS
	}
	gi.handle.CreateComputeInstanceFunc = func(info *nvml.ComputeInstanceProfileInfo) (nvml.ComputeInstance, nvml.Return) {
		s.mu.Lock()
		defer s.mu.Unlock()
		switch ret := s.ciCallRet(i, gi, info); {
		case ret != nvml.SUCCESS:
			return nil, ret
		case int(info.SliceCount) != gi.profile.Slices:
			return nil, nvml.ERROR_NOT_SUPPORTED // see the simplifications in mig.go
		case gi.ci != nil:
			return nil, nvml.ERROR_INSUFFICIENT_RESOURCES
		}
		gi.ci = s.newComputeInstance(i, d, gi, *info, "")
		return gi.ci.handle, s.savedRet()
	}
	gi.handle.GetComputeInstancesFunc = func(info *nvml.ComputeInstanceProfileInfo) ([]nvml.ComputeInstance, nvml.Return) {
		s.mu.Lock()
		defer s.mu.Unlock()
		switch ret := s.ciCallRet(i, gi, info); {
		case ret != nvml.SUCCESS:
			return nil, ret
		case gi.ci == nil || int(info.SliceCount) != gi.profile.Slices:
			return nil, nvml.SUCCESS
		}
		return []nvml.ComputeInstance{gi.ci.handle}, nvml.SUCCESS
	}
	gi.handle.GetComputeInstanceByIdFunc = func(id int) (nvml.ComputeInstance, nvml.Return) {
		s.mu.Lock()
		defer s.mu.Unlock()
		if ret := s.liveGI(i, gi); ret != nvml.SUCCESS {
			return nil, ret
		}
		if gi.ci == nil || id != 0 {
			return nil, nvml.ERROR_NOT_FOUND
		}
		return gi.ci.handle, nvml.SUCCESS
	}
}

// newComputeInstance creates gi's compute instance and its MIG device with
// MIG UUID uuid ("": a fresh one). Call with s.mu held.
func (s *Sim) newComputeInstance(i int, parent *mock.Device, gi *gpuInstance, info nvml.ComputeInstanceProfileInfo, uuid string) *computeInstance {
	m := s.mig[i]
	if uuid == "" {
		h := sha256.Sum256(fmt.Appendf(nil, "%s/mig/%d", s.node.GPUs[i].UUID, m.created))
		m.created++
		uuid = fmt.Sprintf("MIG-%x-%x-%x-%x-%x", h[0:4], h[4:6], h[6:8], h[8:10], h[10:16])
	}
	ci := &computeInstance{handle: &mock.ComputeInstance{}, dev: &mock.Device{}, uuid: uuid}
	live := func() nvml.Return {
		if ret := s.liveGI(i, gi); ret != nvml.SUCCESS {
			return ret
		}
		if gi.ci != ci {
			return nvml.ERROR_INVALID_ARGUMENT // a destroyed compute instance's handle
		}
		return nvml.SUCCESS
	}
	ciInfo := nvml.ComputeInstanceInfo{Device: parent, GpuInstance: gi.handle, Id: 0, ProfileId: info.Id,
		Placement: nvml.ComputeInstancePlacement{Start: 0, Size: uint32(gi.profile.Slices)}}
	ci.handle.GetInfoFunc = func() (nvml.ComputeInstanceInfo, nvml.Return) {
		s.mu.Lock()
		defer s.mu.Unlock()
		if ret := live(); ret != nvml.SUCCESS {
			return nvml.ComputeInstanceInfo{}, ret
		}
		return ciInfo, nvml.SUCCESS
	}
	ci.handle.DestroyFunc = func() nvml.Return {
		s.mu.Lock()
		defer s.mu.Unlock()
		if ret := live(); ret != nvml.SUCCESS {
			return ret
		}
		if len(ci.procs) > 0 {
			return nvml.ERROR_IN_USE
		}
		gi.ci = nil
		return s.savedRet()
	}
	d := ci.dev
	guard := func() nvml.Return { s.mu.Lock(); defer s.mu.Unlock(); return live() }
	d.IsMigDeviceHandleFunc = func() (bool, nvml.Return) { return true, nvml.SUCCESS }
	d.GetDeviceHandleFromMigDeviceHandleFunc = func() (nvml.Device, nvml.Return) { return parent, guard() }
	d.GetUUIDFunc = func() (string, nvml.Return) {
		if ret := guard(); ret != nvml.SUCCESS {
			return "", ret
		}
		return ci.uuid, nvml.SUCCESS
	}
	d.GetNameFunc = func() (string, nvml.Return) {
		if ret := guard(); ret != nvml.SUCCESS {
			return "", ret
		}
		return s.node.GPUs[i].Model + " MIG " + gi.profile.Name, nvml.SUCCESS
	}
	d.GetGpuInstanceIdFunc = func() (int, nvml.Return) { return gi.id, guard() }
	d.GetComputeInstanceIdFunc = func() (int, nvml.Return) { return 0, guard() }
	d.GetMemoryInfoFunc = func() (nvml.Memory, nvml.Return) {
		if ret := guard(); ret != nvml.SUCCESS {
			return nvml.Memory{}, ret
		}
		total := uint64(gi.profile.MemoryMiB) << 20
		return nvml.Memory{Total: total, Free: total}, nvml.SUCCESS
	}
	d.GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) {
		s.mu.Lock()
		defer s.mu.Unlock()
		if ret := live(); ret != nvml.SUCCESS {
			return nil, ret
		}
		return slices.Clone(ci.procs), nvml.SUCCESS
	}
	return ci
}

// RunOnMIG starts a simulated process pid on the MIG device migUUID, as a
// container's CUDA program would; StopOnMIG ends it.
func (s *Sim) RunOnMIG(migUUID string, pid uint32) error {
	return s.withMIGDevice(migUUID, func(ci *computeInstance) {
		ci.procs = append(ci.procs, nvml.ProcessInfo{Pid: pid})
	})
}

// StopOnMIG ends the simulated process pid on the MIG device migUUID.
func (s *Sim) StopOnMIG(migUUID string, pid uint32) error {
	return s.withMIGDevice(migUUID, func(ci *computeInstance) {
		ci.procs = slices.DeleteFunc(ci.procs, func(p nvml.ProcessInfo) bool { return p.Pid == pid })
	})
}

func (s *Sim) withMIGDevice(migUUID string, f func(*computeInstance)) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, m := range s.mig {
		if m == nil {
			continue
		}
		for _, gi := range m.gis {
			if gi.ci != nil && gi.ci.uuid == migUUID {
				f(gi.ci)
				return nil
			}
		}
	}
	return fmt.Errorf("simulated node %s has no MIG device %q", s.node.Name, migUUID)
}
