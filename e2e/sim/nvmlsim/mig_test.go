package nvmlsim

import (
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/google/go-cmp/cmp"

	"github.com/volcano-vgpu/volcano-vgpu/e2e/sim/simconfig"
)

// migNode: GPU 0 of an A100-SXM4-40GB pair in MIG mode, GPU 1 not.
func migNode(t *testing.T, model string) simconfig.Node {
	t.Helper()
	f, err := simconfig.Parse([]byte(`version: v1
nodes:
- {namePrefix: m, count: 1, cpu: "8", memory: 8Gi, pods: 10, gpuModel: "` + model + `", gpus: 2, gpuMemoryMiB: 40960, topology: pcie, maxShares: 4, migGPUs: [0]}`))
	if err != nil {
		t.Fatal(err)
	}
	return f.Nodes()[0]
}

func handle(t *testing.T, sim *Sim, i int) nvml.Device {
	t.Helper()
	d, ret := sim.DeviceGetHandleByIndex(i)
	if ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	return d
}

func profile(t *testing.T, d nvml.Device, c int) nvml.GpuInstanceProfileInfo {
	t.Helper()
	info, ret := d.GetGpuInstanceProfileInfo(c)
	if ret != nvml.SUCCESS {
		t.Fatalf("GetGpuInstanceProfileInfo(%d) = %v", c, ret)
	}
	return info
}

func TestMIGMode(t *testing.T) {
	sim := New(migNode(t, "NVIDIA A100-SXM4-40GB"))
	for _, tc := range []struct {
		name    string
		gpu     int
		cur     int
		ret     nvml.Return
		infoRet nvml.Return // of a profile query
	}{
		{"MIG GPU", 0, nvml.DEVICE_MIG_ENABLE, nvml.SUCCESS, nvml.SUCCESS},
		{"MIG-capable GPU with MIG off", 1, nvml.DEVICE_MIG_DISABLE, nvml.SUCCESS, nvml.ERROR_NOT_SUPPORTED},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := handle(t, sim, tc.gpu)
			cur, pending, ret := d.GetMigMode()
			if cur != tc.cur || pending != tc.cur || ret != tc.ret {
				t.Errorf("GetMigMode() = %d, %d, %v; want %d, %d, %v", cur, pending, ret, tc.cur, tc.cur, tc.ret)
			}
			if _, ret := d.GetGpuInstanceProfileInfo(nvml.GPU_INSTANCE_PROFILE_1_SLICE); ret != tc.infoRet {
				t.Errorf("GetGpuInstanceProfileInfo = %v, want %v", ret, tc.infoRet)
			}
		})
	}
	l4 := New(testNode())
	if _, _, ret := handle(t, l4, 0).GetMigMode(); ret != nvml.ERROR_NOT_SUPPORTED {
		t.Errorf("L4 GetMigMode = %v, want ERROR_NOT_SUPPORTED (no MIG on the model)", ret)
	}
}

func TestMIGProfilesAndPlacements(t *testing.T) {
	type pl = nvml.GpuInstancePlacement
	at := func(starts []uint32, size uint32) []pl {
		out := make([]pl, len(starts))
		for k, st := range starts {
			out[k] = pl{Start: st, Size: size}
		}
		return out
	}
	tests := []struct {
		name       string
		model      string
		profile    int
		id         uint32
		slices     uint32
		instances  uint32
		memMiB     uint64
		placements []pl
		ret        nvml.Return
	}{
		{name: "A100-40 1g.5gb: seven single slices", model: "NVIDIA A100-SXM4-40GB", profile: nvml.GPU_INSTANCE_PROFILE_1_SLICE,
			id: 19, slices: 1, instances: 7, memMiB: 4864, placements: at([]uint32{0, 1, 2, 3, 4, 5, 6}, 1)},
		{name: "A100-40 1g.10gb: doubled memory on even pairs", model: "NVIDIA A100-SXM4-40GB", profile: nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV2,
			id: 15, slices: 1, instances: 4, memMiB: 9856, placements: at([]uint32{0, 2, 4, 6}, 2)},
		{name: "A100-40 3g.20gb: either half", model: "NVIDIA A100-SXM4-40GB", profile: nvml.GPU_INSTANCE_PROFILE_3_SLICE,
			id: 9, slices: 3, instances: 2, memMiB: 19968, placements: at([]uint32{0, 4}, 4)},
		{name: "A100-40 4g.20gb: first half only", model: "NVIDIA A100-SXM4-40GB", profile: nvml.GPU_INSTANCE_PROFILE_4_SLICE,
			id: 5, slices: 4, instances: 1, memMiB: 19968, placements: at([]uint32{0}, 4)},
		{name: "A100-80 7g.80gb: all eight memory slices", model: "NVIDIA A100-SXM4-80GB", profile: nvml.GPU_INSTANCE_PROFILE_7_SLICE,
			id: 0, slices: 7, instances: 1, memMiB: 80384, placements: at([]uint32{0}, 8)},
		{name: "A100-80 1g.10gb+me: one, anywhere a 1g goes", model: "NVIDIA A100-SXM4-80GB", profile: nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV1,
			id: 20, slices: 1, instances: 1, memMiB: 9856, placements: at([]uint32{0, 1, 2, 3, 4, 5, 6}, 1)},
		{name: "H100-80 2g.20gb", model: "NVIDIA H100 80GB HBM3", profile: nvml.GPU_INSTANCE_PROFILE_2_SLICE,
			id: 14, slices: 2, instances: 3, memMiB: 20096, placements: at([]uint32{0, 2, 4}, 2)},
		{name: "no 6-slice profile on an A100", model: "NVIDIA A100-SXM4-40GB", profile: nvml.GPU_INSTANCE_PROFILE_6_SLICE, ret: nvml.ERROR_NOT_SUPPORTED},
		{name: "profile constant out of range", model: "NVIDIA A100-SXM4-40GB", profile: nvml.GPU_INSTANCE_PROFILE_COUNT, ret: nvml.ERROR_INVALID_ARGUMENT},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := handle(t, New(migNode(t, tc.model)), 0)
			info, ret := d.GetGpuInstanceProfileInfo(tc.profile)
			if ret != tc.ret {
				t.Fatalf("GetGpuInstanceProfileInfo = %v, want %v", ret, tc.ret)
			}
			if ret != nvml.SUCCESS {
				return
			}
			if info.Id != tc.id || info.SliceCount != tc.slices || info.InstanceCount != tc.instances || info.MemorySizeMB != tc.memMiB {
				t.Errorf("info = id %d, %d slices, %d instances, %d MiB; want %d, %d, %d, %d",
					info.Id, info.SliceCount, info.InstanceCount, info.MemorySizeMB, tc.id, tc.slices, tc.instances, tc.memMiB)
			}
			got, ret := d.GetGpuInstancePossiblePlacements(&info)
			if ret != nvml.SUCCESS {
				t.Fatal(ret)
			}
			if diff := cmp.Diff(tc.placements, got); diff != "" {
				t.Errorf("placements (-want +got):\n%s", diff)
			}
		})
	}
}

// step is one NVML call on the MIG GPU of an A100-40GB.
type step struct {
	profile int // GPU instance profile constant
	start   uint32
	size    uint32
	destroy bool // destroy the instance created at start (instead of creating)
	want    nvml.Return
}

func TestMIGCreateDestroy(t *testing.T) {
	const (
		g1   = nvml.GPU_INSTANCE_PROFILE_1_SLICE
		g1me = nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV1
		g2   = nvml.GPU_INSTANCE_PROFILE_2_SLICE
		g3   = nvml.GPU_INSTANCE_PROFILE_3_SLICE
		g4   = nvml.GPU_INSTANCE_PROFILE_4_SLICE
		g7   = nvml.GPU_INSTANCE_PROFILE_7_SLICE
	)
	tests := []struct {
		name  string
		steps []step
		left  map[int]int // profile → instances listed at the end
	}{
		{name: "3g on each half", steps: []step{{g3, 0, 4, false, nvml.SUCCESS}, {g3, 4, 4, false, nvml.SUCCESS}}, left: map[int]int{g3: 2}},
		{name: "a 3g over a 1g in its half is refused", // 1g at slice 5 lies in 4+4
			steps: []step{{g1, 5, 1, false, nvml.SUCCESS}, {g3, 4, 4, false, nvml.ERROR_INSUFFICIENT_RESOURCES}, {g3, 0, 4, false, nvml.SUCCESS}},
			left:  map[int]int{g1: 1, g3: 1}},
		{name: "7g over anything is refused", steps: []step{{g1, 6, 1, false, nvml.SUCCESS}, {g7, 0, 8, false, nvml.ERROR_INSUFFICIENT_RESOURCES}}, left: map[int]int{g1: 1}},
		{name: "a placement not in the table", steps: []step{{g3, 2, 4, false, nvml.ERROR_INVALID_ARGUMENT}, {g2, 1, 2, false, nvml.ERROR_INVALID_ARGUMENT}}},
		{name: "the same slice twice", steps: []step{{g2, 2, 2, false, nvml.SUCCESS}, {g1, 3, 1, false, nvml.ERROR_INSUFFICIENT_RESOURCES}}, left: map[int]int{g2: 1}},
		{name: "one +me instance per GPU", steps: []step{{g1me, 0, 1, false, nvml.SUCCESS}, {g1me, 1, 1, false, nvml.ERROR_INSUFFICIENT_RESOURCES}}, left: map[int]int{g1me: 1}},
		{name: "destroy frees the slices", steps: []step{{g4, 0, 4, false, nvml.SUCCESS}, {g3, 0, 4, false, nvml.ERROR_INSUFFICIENT_RESOURCES},
			{g4, 0, 4, true, nvml.SUCCESS}, {g3, 0, 4, false, nvml.SUCCESS}}, left: map[int]int{g3: 1}},
		{name: "a 2g, 2g, 2g, 1g GPU is full", steps: []step{{g2, 0, 2, false, nvml.SUCCESS}, {g2, 2, 2, false, nvml.SUCCESS}, {g2, 4, 2, false, nvml.SUCCESS},
			{g1, 6, 1, false, nvml.SUCCESS}, {g1, 5, 1, false, nvml.ERROR_INSUFFICIENT_RESOURCES}}, left: map[int]int{g2: 3, g1: 1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := handle(t, New(migNode(t, "NVIDIA A100-SXM4-40GB")), 0)
			made := map[uint32]nvml.GpuInstance{}
			for k, s := range tc.steps {
				info := profile(t, d, s.profile)
				if s.destroy {
					if ret := made[s.start].Destroy(); ret != s.want {
						t.Fatalf("step %d: Destroy = %v, want %v", k, ret, s.want)
					}
					continue
				}
				gi, ret := d.CreateGpuInstanceWithPlacement(&info, &nvml.GpuInstancePlacement{Start: s.start, Size: s.size})
				if ret != s.want {
					t.Fatalf("step %d: CreateGpuInstanceWithPlacement(%d+%d) = %v, want %v", k, s.start, s.size, ret, s.want)
				}
				if ret == nvml.SUCCESS {
					gii, ret := gi.GetInfo()
					if ret != nvml.SUCCESS || gii.ProfileId != info.Id || gii.Placement != (nvml.GpuInstancePlacement{Start: s.start, Size: s.size}) {
						t.Errorf("step %d: GetInfo = %+v, %v", k, gii, ret)
					}
					made[s.start] = gi
				}
			}
			for _, c := range []int{g1, g1me, g2, g3, g4, g7} {
				info := profile(t, d, c)
				gis, ret := d.GetGpuInstances(&info)
				if ret != nvml.SUCCESS || len(gis) != tc.left[c] {
					t.Errorf("GetGpuInstances(profile %d) = %d instances, %v; want %d", info.Id, len(gis), ret, tc.left[c])
				}
			}
		})
	}
}

func TestMIGDevices(t *testing.T) {
	sim := New(migNode(t, "NVIDIA A100-SXM4-40GB"))
	d := handle(t, sim, 0)
	info3 := profile(t, d, nvml.GPU_INSTANCE_PROFILE_3_SLICE)
	gi, ret := d.CreateGpuInstanceWithPlacement(&info3, &nvml.GpuInstancePlacement{Start: 4, Size: 4})
	if ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	if _, ret := d.GetMigDeviceHandleByIndex(0); ret != nvml.ERROR_NOT_FOUND {
		t.Errorf("MIG device of a GPU instance without compute instance: %v, want ERROR_NOT_FOUND", ret)
	}
	if _, ret := gi.GetComputeInstanceProfileInfo(nvml.COMPUTE_INSTANCE_PROFILE_4_SLICE, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED); ret != nvml.ERROR_NOT_SUPPORTED {
		t.Errorf("a 4-slice compute instance in a 3g GPU instance: %v, want ERROR_NOT_SUPPORTED", ret)
	}
	ciInfo, ret := gi.GetComputeInstanceProfileInfo(nvml.COMPUTE_INSTANCE_PROFILE_3_SLICE, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
	if ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	ci, ret := gi.CreateComputeInstance(&ciInfo)
	if ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	if _, ret := gi.CreateComputeInstance(&ciInfo); ret != nvml.ERROR_INSUFFICIENT_RESOURCES {
		t.Errorf("second compute instance: %v, want ERROR_INSUFFICIENT_RESOURCES", ret)
	}
	mig, ret := d.GetMigDeviceHandleByIndex(0)
	if ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	uuid, _ := mig.GetUUID()
	mem, _ := mig.GetMemoryInfo()
	giID, _ := mig.GetGpuInstanceId()
	gii, _ := gi.GetInfo()
	parent, _ := mig.GetDeviceHandleFromMigDeviceHandle()
	if len(uuid) < 5 || uuid[:4] != "MIG-" || mem.Total != 19968<<20 || giID != int(gii.Id) || parent != d {
		t.Errorf("MIG device: uuid %q, %d MiB, GI %d (want %d), parent %v", uuid, mem.Total>>20, giID, gii.Id, parent == d)
	}
	if _, ret := d.GetMigDeviceHandleByIndex(1); ret != nvml.ERROR_NOT_FOUND {
		t.Errorf("index past the last MIG device: %v, want ERROR_NOT_FOUND", ret)
	}

	// a process holds the compute instance; the GPU instance holds its compute instance
	if err := sim.RunOnMIG(uuid, 4242); err != nil {
		t.Fatal(err)
	}
	if procs, _ := mig.GetComputeRunningProcesses(); len(procs) != 1 || procs[0].Pid != 4242 {
		t.Errorf("processes = %+v, want pid 4242", procs)
	}
	for _, c := range []struct {
		name string
		call func() nvml.Return
		want nvml.Return
	}{
		{"compute instance with a process", ci.Destroy, nvml.ERROR_IN_USE},
		{"GPU instance with a compute instance", gi.Destroy, nvml.ERROR_IN_USE},
		{"process ends", func() nvml.Return {
			if err := sim.StopOnMIG(uuid, 4242); err != nil {
				t.Fatal(err)
			}
			return nvml.SUCCESS
		}, nvml.SUCCESS},
		{"compute instance", ci.Destroy, nvml.SUCCESS},
		{"GPU instance", gi.Destroy, nvml.SUCCESS},
		{"GPU instance again (stale handle)", gi.Destroy, nvml.ERROR_INVALID_ARGUMENT},
	} {
		if ret := c.call(); ret != c.want {
			t.Errorf("destroy %s: %v, want %v", c.name, ret, c.want)
		}
	}
	if _, ret := mig.GetUUID(); ret != nvml.ERROR_INVALID_ARGUMENT {
		t.Errorf("MIG device of a destroyed instance answers %v, want ERROR_INVALID_ARGUMENT", ret)
	}

	// a re-created instance is a new MIG device
	gi, _ = d.CreateGpuInstanceWithPlacement(&info3, &nvml.GpuInstancePlacement{Start: 4, Size: 4})
	if _, ret := gi.CreateComputeInstance(&ciInfo); ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	again, _ := d.GetMigDeviceHandleByIndex(0)
	if u, _ := again.GetUUID(); u == uuid {
		t.Errorf("re-created instance kept MIG UUID %s", u)
	}
}

func TestMIGOnALostGPU(t *testing.T) {
	sim := New(migNode(t, "NVIDIA A100-SXM4-40GB"))
	d := handle(t, sim, 0)
	info := profile(t, d, nvml.GPU_INSTANCE_PROFILE_1_SLICE)
	if err := sim.FallOffBus(sim.Node().GPUs[0].UUID); err != nil {
		t.Fatal(err)
	}
	if _, _, ret := d.GetMigMode(); ret != nvml.ERROR_GPU_IS_LOST {
		t.Errorf("GetMigMode = %v, want ERROR_GPU_IS_LOST", ret)
	}
	if _, ret := d.CreateGpuInstanceWithPlacement(&info, &nvml.GpuInstancePlacement{Start: 0, Size: 1}); ret != nvml.ERROR_GPU_IS_LOST {
		t.Errorf("CreateGpuInstanceWithPlacement = %v, want ERROR_GPU_IS_LOST", ret)
	}
}

func TestFailMIGCreate(t *testing.T) {
	sim := New(migNode(t, "NVIDIA A100-SXM4-40GB"))
	d := handle(t, sim, 0)
	info := profile(t, d, nvml.GPU_INSTANCE_PROFILE_1_SLICE)
	at := &nvml.GpuInstancePlacement{Start: 0, Size: 1}
	if err := sim.FailMIGCreate(sim.Node().GPUs[0].UUID); err != nil {
		t.Fatal(err)
	}
	if _, ret := d.CreateGpuInstanceWithPlacement(&info, at); ret != nvml.ERROR_INSUFFICIENT_RESOURCES {
		t.Errorf("the create after FailMIGCreate = %v, want ERROR_INSUFFICIENT_RESOURCES", ret)
	}
	if _, ret := d.CreateGpuInstanceWithPlacement(&info, at); ret != nvml.SUCCESS {
		t.Errorf("the create after that = %v, want SUCCESS (the fault is for one create)", ret)
	}
	if err := sim.FailMIGCreate("GPU-nope"); err == nil {
		t.Error("FailMIGCreate on a GPU the node lacks succeeded")
	}
}

func TestMIGMinors(t *testing.T) {
	text := MIGMinors()
	for _, tc := range []struct {
		name string
		line string
	}{
		{"the config capability first", "config 1\nmonitor 2\ngpu0/gi0/access 3\n"},
		{"GPU 0, GPU instance 1: after gi0 and its 8 compute instances", "gpu0/gi1/access 12\ngpu0/gi1/ci0/access 13\n"},
		{"GPU 1 starts 135 minors later", "gpu1/gi0/access 138\n"},
		{"the last compute instance of the last GPU", "gpu31/gi14/ci7/access 4322\n"}, // 3 + 31*135 + 14*9 + 1 + 7
	} {
		if !strings.Contains(text, tc.line) {
			t.Errorf("%s: mig-minors lacks %q", tc.name, tc.line)
		}
	}
	if n := strings.Count(text, "\n"); n != 2+32*135 {
		t.Errorf("%d lines, want 2 + 32 GPUs × 135", n)
	}
}
