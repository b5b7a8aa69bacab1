package gpu

import (
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/volcano-vgpu/volcano-vgpu/api"
)

// MIG is what NVML says of one GPU's MIG state.
type MIG struct {
	// Capable: the GPU has a MIG mode (A100, H100…); false on the others.
	Capable bool
	// Enabled: MIG mode is on now. Pending is the mode after the next GPU
	// reset (nvidia-smi -mig sets it; it differs from Enabled until then).
	Enabled, Pending bool
	// With MIG on: memory slices, GPU instance profiles (with their legal
	// placements) and the GPU instances that exist, with the UUID of each
	// one's MIG device and whether processes run on it.
	MemorySlices int
	Profiles     []api.MIGProfile
	Instances    []api.MIGInstance
	// Unnamed lists NVML profile IDs this package cannot name (profiles of
	// newer GPUs: graphics, all media engines); they are not offered.
	Unnamed []uint32
	// Minor is the GPU's device minor (/dev/nvidia<Minor>) and IDs the GPU
	// and compute instance IDs of each MIG device, by MIG UUID: what the
	// device nodes a container needs for the device are named after
	// (/proc/driver/nvidia-caps/mig-minors). Read with MIG mode on.
	Minor int
	IDs   map[string]MIGIDs
}

// MIGIDs are a MIG device's GPU instance and compute instance IDs.
type MIGIDs struct{ GI, CI int }

// ErrMIG is wrapped by every error MIG returns.
var ErrMIG = errors.New("cannot read the GPU's MIG state")

// MIG implements DeviceLib.
func (l *nvmlLib) MIG(uuid string) (MIG, error) {
	fail := func(what string, ret nvml.Return) (MIG, error) {
		return MIG{}, fmt.Errorf("%w: GPU %s: %s: %v", ErrMIG, uuid, what, ret)
	}
	h, ret := l.lib.DeviceGetHandleByUUID(uuid)
	if ret != nvml.SUCCESS {
		return fail("handle", ret)
	}
	cur, pending, ret := h.GetMigMode()
	switch {
	case ret == nvml.ERROR_NOT_SUPPORTED:
		return MIG{}, nil
	case ret != nvml.SUCCESS:
		return fail("MIG mode", ret)
	}
	m := MIG{Capable: true, Enabled: cur == nvml.DEVICE_MIG_ENABLE, Pending: pending == nvml.DEVICE_MIG_ENABLE}
	if !m.Enabled {
		return m, nil
	}
	mem, ret := h.GetMemoryInfo()
	if ret != nvml.SUCCESS {
		return fail("memory info", ret)
	}
	if m.Minor, ret = h.GetMinorNumber(); ret != nvml.SUCCESS {
		return fail("minor number", ret)
	}
	migDevices, err := l.migDevices(h)
	if err != nil {
		return MIG{}, fmt.Errorf("%w: GPU %s: %w", ErrMIG, uuid, err)
	}
	for _, d := range migDevices {
		if m.IDs == nil {
			m.IDs = map[string]MIGIDs{}
		}
		m.IDs[d.uuid] = d.ids
	}
	for c := 0; c < nvml.GPU_INSTANCE_PROFILE_COUNT; c++ {
		info, ret := h.GetGpuInstanceProfileInfo(c)
		switch {
		case ret == nvml.ERROR_NOT_SUPPORTED || ret == nvml.ERROR_INVALID_ARGUMENT:
			continue // not a profile of this GPU
		case ret != nvml.SUCCESS:
			return fail(fmt.Sprintf("GPU instance profile %d", c), ret)
		}
		name, ok := profileName(c, info, mem.Total)
		if !ok {
			m.Unnamed = append(m.Unnamed, info.Id)
			continue
		}
		pls, ret := h.GetGpuInstancePossiblePlacements(&info)
		if ret != nvml.SUCCESS {
			return fail("placements of "+name, ret)
		}
		p := api.MIGProfile{Name: name, Slices: int(info.SliceCount), MemoryMiB: int64(info.MemorySizeMB), Instances: int(info.InstanceCount)}
		for _, pl := range pls {
			p.Placements = append(p.Placements, api.MIGPlacement{Start: int(pl.Start), Size: int(pl.Size)})
			m.MemorySlices = max(m.MemorySlices, int(pl.Start+pl.Size))
		}
		m.Profiles = append(m.Profiles, p)
		gis, ret := h.GetGpuInstances(&info)
		if ret != nvml.SUCCESS {
			return fail("GPU instances of "+name, ret)
		}
		for _, gi := range gis {
			gii, ret := gi.GetInfo()
			if ret != nvml.SUCCESS {
				return fail("GPU instance of "+name, ret)
			}
			in := api.MIGInstance{Profile: name, Placement: api.MIGPlacement{Start: int(gii.Placement.Start), Size: int(gii.Placement.Size)}}
			if d, ok := migDevices[int(gii.Id)]; ok {
				in.UUID, in.InUse = d.uuid, d.inUse
			}
			m.Instances = append(m.Instances, in)
		}
	}
	slices.SortFunc(m.Instances, func(a, b api.MIGInstance) int { return a.Placement.Start - b.Placement.Start })
	return m, nil
}

type migDevice struct {
	uuid  string
	inUse bool
	ids   MIGIDs
}

// migDevices maps GPU instance IDs to their MIG device (the first compute
// instance's, which spans the GPU instance where this plugin created it).
func (l *nvmlLib) migDevices(h nvml.Device) (map[int]migDevice, error) {
	n, ret := h.GetMaxMigDeviceCount()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("MIG device count: %v", ret)
	}
	out := map[int]migDevice{}
	for i := 0; i < n; i++ {
		d, ret := h.GetMigDeviceHandleByIndex(i)
		switch {
		case ret == nvml.ERROR_NOT_FOUND:
			continue // no MIG device at this index
		case ret != nvml.SUCCESS:
			return nil, fmt.Errorf("MIG device %d: %v", i, ret)
		}
		gi, ret := d.GetGpuInstanceId()
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("GPU instance of MIG device %d: %v", i, ret)
		}
		ci, ret := d.GetComputeInstanceId()
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("compute instance of MIG device %d: %v", i, ret)
		}
		uuid, ret := d.GetUUID()
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("UUID of MIG device %d: %v", i, ret)
		}
		procs, ret := d.GetComputeRunningProcesses()
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("processes on MIG device %s: %v", uuid, ret)
		}
		if _, seen := out[gi]; !seen {
			out[gi] = migDevice{uuid: uuid, inUse: len(procs) > 0, ids: MIGIDs{GI: gi, CI: ci}}
		}
	}
	return out, nil
}

// profileName names a GPU instance profile as nvidia-smi does: compute
// slices, then memory in GB as the GPU's total GB times the profile's share
// of the memory rounded up to eighths (4864 MiB of a 40 GB A100 → 1/8 → 5gb),
// then the media engine suffix of the variant. Variants with no name here
// (graphics, all media engines) give false.
func profileName(c int, info nvml.GpuInstanceProfileInfo, totalBytes uint64) (string, bool) {
	suffix := ""
	switch c {
	case nvml.GPU_INSTANCE_PROFILE_1_SLICE, nvml.GPU_INSTANCE_PROFILE_2_SLICE, nvml.GPU_INSTANCE_PROFILE_3_SLICE,
		nvml.GPU_INSTANCE_PROFILE_4_SLICE, nvml.GPU_INSTANCE_PROFILE_6_SLICE, nvml.GPU_INSTANCE_PROFILE_7_SLICE,
		nvml.GPU_INSTANCE_PROFILE_8_SLICE, nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV2:
	case nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV1, nvml.GPU_INSTANCE_PROFILE_2_SLICE_REV1:
		suffix = "+me"
	case nvml.GPU_INSTANCE_PROFILE_1_SLICE_NO_ME, nvml.GPU_INSTANCE_PROFILE_2_SLICE_NO_ME:
		suffix = "-me"
	default:
		return "", false
	}
	if totalBytes == 0 || info.SliceCount == 0 {
		return "", false
	}
	const gib = 1 << 30
	share := math.Ceil(float64(info.MemorySizeMB<<20)/float64(totalBytes)*8) / 8
	gb := math.Round(share * float64((totalBytes+gib-1)/gib))
	return fmt.Sprintf("%dg.%dgb%s", info.SliceCount, int(gb), suffix), true
}
