package gpu

import (
	"errors"
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/volcano-vgpu/volcano-vgpu/api"
)

// MIGManager creates and destroys MIG instances. The NVML device library
// implements it (the real one and the simulated one alike).
type MIGManager interface {
	// CreateMIG creates a GPU instance of profile at placement on GPU uuid,
	// and a compute instance spanning it; it returns the MIG device's UUID.
	CreateMIG(uuid, profile string, at api.MIGPlacement) (string, error)
	// DestroyMIG destroys the GPU instance at placement on GPU uuid, its
	// compute instances first. An instance processes run on is kept
	// (ErrMIGInUse); none there is ErrMIGNotFound.
	DestroyMIG(uuid string, at api.MIGPlacement) error
}

var _ MIGManager = (*nvmlLib)(nil)

// Errors of MIGManager, beside ErrMIG (which every one of them wraps).
var (
	ErrMIGTaken    = errors.New("memory slices held by another MIG instance")
	ErrMIGInUse    = errors.New("MIG instance in use")
	ErrMIGNotFound = errors.New("no MIG instance there")
)

// CreateMIG implements MIGManager.
func (l *nvmlLib) CreateMIG(uuid, profile string, at api.MIGPlacement) (string, error) {
	fail := func(format string, a ...any) (string, error) {
		return "", fmt.Errorf("%w: GPU %s: %s at memory slices %v: %s", ErrMIG, uuid, profile, at, fmt.Sprintf(format, a...))
	}
	h, info, err := l.profile(uuid, profile)
	if err != nil {
		return "", err
	}
	gi, ret := h.CreateGpuInstanceWithPlacement(&info, &nvml.GpuInstancePlacement{Start: uint32(at.Start), Size: uint32(at.Size)})
	switch ret {
	case nvml.SUCCESS:
	case nvml.ERROR_INSUFFICIENT_RESOURCES:
		return "", fmt.Errorf("%w: GPU %s: %s at memory slices %v: %w (or the profile's instance count is reached)", ErrMIG, uuid, profile, at, ErrMIGTaken)
	default:
		return fail("creating the GPU instance: %v", ret)
	}
	undo := func(format string, a ...any) (string, error) {
		if ret := gi.Destroy(); ret != nvml.SUCCESS {
			format += fmt.Sprintf(" (and destroying the GPU instance again: %v)", ret)
		}
		return fail(format, a...)
	}
	ciInfo, ret := gi.GetComputeInstanceProfileInfo(ciProfileOf(int(info.SliceCount)), nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
	if ret != nvml.SUCCESS {
		return undo("compute instance profile of %d slices: %v", info.SliceCount, ret)
	}
	ci, ret := gi.CreateComputeInstance(&ciInfo)
	if ret != nvml.SUCCESS {
		return undo("creating the compute instance: %v", ret)
	}
	gii, ret := gi.GetInfo()
	if ret != nvml.SUCCESS {
		_ = ci.Destroy()
		return undo("GPU instance info: %v", ret)
	}
	devs, err := l.migDevices(h)
	if err != nil {
		_ = ci.Destroy()
		return undo("%v", err)
	}
	d, ok := devs[int(gii.Id)]
	if !ok {
		_ = ci.Destroy()
		return undo("NVML lists no MIG device for the new instance")
	}
	return d.uuid, nil
}

// DestroyMIG implements MIGManager.
func (l *nvmlLib) DestroyMIG(uuid string, at api.MIGPlacement) error {
	fail := func(err error) error {
		return fmt.Errorf("%w: GPU %s: instance at memory slices %v: %w", ErrMIG, uuid, at, err)
	}
	h, ret := l.lib.DeviceGetHandleByUUID(uuid)
	if ret != nvml.SUCCESS {
		return fail(fmt.Errorf("handle: %v", ret))
	}
	gi, err := gpuInstanceAt(h, at)
	if err != nil {
		return fail(err)
	}
	for c := 0; c < nvml.COMPUTE_INSTANCE_PROFILE_COUNT; c++ {
		info, ret := gi.GetComputeInstanceProfileInfo(c, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
		if ret != nvml.SUCCESS {
			continue // not a compute instance profile of this GPU instance
		}
		cis, ret := gi.GetComputeInstances(&info)
		if ret != nvml.SUCCESS {
			return fail(fmt.Errorf("compute instances: %v", ret))
		}
		for _, ci := range cis {
			switch ret := ci.Destroy(); ret {
			case nvml.SUCCESS:
			case nvml.ERROR_IN_USE:
				return fail(fmt.Errorf("%w: processes run on it", ErrMIGInUse))
			default:
				return fail(fmt.Errorf("destroying a compute instance: %v", ret))
			}
		}
	}
	switch ret := gi.Destroy(); ret {
	case nvml.SUCCESS:
		return nil
	case nvml.ERROR_IN_USE:
		return fail(fmt.Errorf("%w: it still has compute instances", ErrMIGInUse))
	default:
		return fail(fmt.Errorf("destroying the GPU instance: %v", ret))
	}
}

// profile finds the NVML profile of GPU uuid that nvidia-smi names name.
func (l *nvmlLib) profile(uuid, name string) (nvml.Device, nvml.GpuInstanceProfileInfo, error) {
	h, ret := l.lib.DeviceGetHandleByUUID(uuid)
	if ret != nvml.SUCCESS {
		return nil, nvml.GpuInstanceProfileInfo{}, fmt.Errorf("%w: GPU %s: handle: %v", ErrMIG, uuid, ret)
	}
	mem, ret := h.GetMemoryInfo()
	if ret != nvml.SUCCESS {
		return nil, nvml.GpuInstanceProfileInfo{}, fmt.Errorf("%w: GPU %s: memory info: %v", ErrMIG, uuid, ret)
	}
	var names []string
	for c := 0; c < nvml.GPU_INSTANCE_PROFILE_COUNT; c++ {
		info, ret := h.GetGpuInstanceProfileInfo(c)
		if ret != nvml.SUCCESS {
			continue
		}
		if n, ok := profileName(c, info, mem.Total); ok {
			if n == name {
				return h, info, nil
			}
			names = append(names, n)
		}
	}
	return nil, nvml.GpuInstanceProfileInfo{}, fmt.Errorf("%w: GPU %s has no MIG profile %s (it has %v; is its MIG mode on?)", ErrMIG, uuid, name, names)
}

// gpuInstanceAt finds the GPU instance at placement at.
func gpuInstanceAt(h nvml.Device, at api.MIGPlacement) (nvml.GpuInstance, error) {
	for c := 0; c < nvml.GPU_INSTANCE_PROFILE_COUNT; c++ {
		info, ret := h.GetGpuInstanceProfileInfo(c)
		if ret != nvml.SUCCESS {
			continue
		}
		gis, ret := h.GetGpuInstances(&info)
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("GPU instances: %v", ret)
		}
		for _, gi := range gis {
			gii, ret := gi.GetInfo()
			if ret == nvml.SUCCESS && int(gii.Placement.Start) == at.Start && int(gii.Placement.Size) == at.Size {
				return gi, nil
			}
		}
	}
	return nil, ErrMIGNotFound
}

// ciProfileOf is the compute instance profile of n compute slices.
func ciProfileOf(n int) int {
	switch n {
	case 1:
		return nvml.COMPUTE_INSTANCE_PROFILE_1_SLICE
	case 2:
		return nvml.COMPUTE_INSTANCE_PROFILE_2_SLICE
	case 3:
		return nvml.COMPUTE_INSTANCE_PROFILE_3_SLICE
	case 4:
		return nvml.COMPUTE_INSTANCE_PROFILE_4_SLICE
	case 6:
		return nvml.COMPUTE_INSTANCE_PROFILE_6_SLICE
	case 7:
		return nvml.COMPUTE_INSTANCE_PROFILE_7_SLICE
	case 8:
		return nvml.COMPUTE_INSTANCE_PROFILE_8_SLICE
	}
	return nvml.COMPUTE_INSTANCE_PROFILE_COUNT // no such profile: NVML refuses it
}
