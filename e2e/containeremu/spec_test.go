package containeremu

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/volcano-vgpu/volcano-vgpu/api"
	"github.com/volcano-vgpu/volcano-vgpu/e2e/kubeletemu"
)

// uuid is a canonical GPU UUID ending in n.
func uuid(n int) string { return "GPU-00000000-0000-0000-0000-00000000000" + string(rune('0'+n)) }

func fourGPUs() []GPU {
	return []GPU{{uuid(0), 81920}, {uuid(1), 81920}, {uuid(2), 81920}, {uuid(3), 81920}}
}

func TestVisibleGPUs(t *testing.T) {
	gpus := fourGPUs()
	migs := []GPU{{"MIG-00000000-0000-0000-0000-000000000001", 9856}, {"MIG-00000000-0000-0000-0000-000000000002", 4864}}
	for _, tc := range []struct {
		name    string
		env     *string // nil: unset
		cdi     []string
		all     bool
		want    []GPU
		wantErr error
	}{
		{name: "one UUID", env: ptr(uuid(2)), want: gpus[2:3]},
		{name: "UUIDs in driver order, not the variable's", env: ptr(uuid(3) + "," + uuid(1)), want: []GPU{gpus[1], gpus[3]}},
		{name: "indexes", env: ptr("0, 2"), want: []GPU{gpus[0], gpus[2]}},
		{name: "duplicates once", env: ptr(uuid(1) + ",1"), want: gpus[1:2]},
		{name: "all", env: ptr("all"), want: gpus},
		{name: "none", env: ptr("none")},
		{name: "void", env: ptr("void")},
		{name: "unset: no GPU", env: nil},
		{name: "unknown UUID", env: ptr("GPU-99999999-0000-0000-0000-000000000000"), wantErr: ErrUnknownGPU},
		{name: "index out of range", env: ptr("4"), wantErr: ErrUnknownGPU},
		{name: "runtime ignoring the variable exposes all", env: ptr(uuid(2)), all: true, want: gpus},
		{name: "CDI by UUID, void env", env: ptr("void"), cdi: []string{"nvidia.com/gpu=" + uuid(3), "nvidia.com/gpu=" + uuid(0), "volcano-vgpu.io/limiter=u_main"}, want: []GPU{gpus[0], gpus[3]}},
		{name: "CDI by index", cdi: []string{"nvidia.com/gpu=1"}, want: gpus[1:2]},
		{name: "CDI all", cdi: []string{"nvidia.com/gpu=all"}, want: gpus},
		{name: "CDI plus a pod's env override: the legacy hook adds its GPUs too", env: ptr("all"), cdi: []string{"nvidia.com/gpu=1"}, want: gpus},
		{name: "CDI unknown GPU", cdi: []string{"nvidia.com/gpu=GPU-99999999-0000-0000-0000-000000000000"}, wantErr: ErrUnresolvableCDI},
		{name: "CDI kind without a spec", cdi: []string{"example.com/gpu=0"}, wantErr: ErrUnresolvableCDI},
		{name: "CDI MIG device by its UUID", env: ptr("void"), cdi: []string{"nvidia.com/gpu=" + migs[0].UUID}, want: migs[:1]},
		{name: "MIG device in the variable (env mode)", env: ptr(migs[1].UUID), want: migs[1:]},
		{name: "a GPU and a MIG device: GPUs first", env: ptr(migs[0].UUID + "," + uuid(2)), want: []GPU{gpus[2], migs[0]}},
		{name: "CDI MIG device the node does not have", cdi: []string{"nvidia.com/gpu=MIG-99999999-0000-0000-0000-000000000000"}, wantErr: ErrUnresolvableCDI},
		{name: "unknown MIG device in the variable", env: ptr("MIG-99999999-0000-0000-0000-000000000000"), wantErr: ErrUnknownGPU},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Container{Node: "n", NodeGPUs: gpus, NodeMIG: migs, ExposeAllGPUs: tc.all, Response: kubeletemu.AllocateResponse{Envs: map[string]string{}, CDIDevices: tc.cdi}}
			if tc.env != nil {
				c.Response.Envs[api.EnvVisibleDevices] = *tc.env
			}
			got, err := c.visibleGPUs()
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("error %v, want %v", err, tc.wantErr)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("GPUs (-want +got):\n%s", diff)
			}
		})
	}
}

func ptr(s string) *string { return &s }

// response is an Allocate answer like the device plugin's.
func response(visible string) kubeletemu.AllocateResponse {
	return kubeletemu.AllocateResponse{
		Envs: map[string]string{api.EnvVisibleDevices: visible, api.EnvConfig: api.LimiterConfigPath, api.EnvSharedDir: "/var/run/vcuda", api.EnvPolicy: "fixed"},
		Mounts: []kubeletemu.Mount{
			{ContainerPath: api.LimiterConfigPath, HostPath: "/h/c/vcuda.config", ReadOnly: true},
			{ContainerPath: "/usr/local/volcano-vgpu/libvcuda.so", HostPath: "/h/lib/libvcuda.so", ReadOnly: true},
			{ContainerPath: "/var/run/vcuda", HostPath: "/h/c/shared"},
			{ContainerPath: api.LdPreloadPath, HostPath: "/h/ld.so.preload", ReadOnly: true},
		},
	}
}

func TestBuildSpec(t *testing.T) {
	c := Container{Node: "n", NodeGPUs: fourGPUs(), PodUID: "p", Name: "c", Response: response(uuid(3) + "," + uuid(1))}
	s, err := buildSpec(c, hostPaths{DriverDir: "/h/fake", Workload: "/h/workload", GPUDir: "/h/gpus"})
	if err != nil {
		t.Fatal(err)
	}
	// Parents first (by depth), kubelet's order among equals.
	want := []mountSpec{
		{Source: "/h/ld.so.preload", Target: "/etc/ld.so.preload", ReadOnly: true},
		{Source: "/h/c/vcuda.config", Target: "/etc/vcuda/vcuda.config", ReadOnly: true},
		{Source: "/h/c/shared", Target: "/var/run/vcuda"},
		{Source: "/h/gpus/" + uuid(1) + ".fakegpu", Target: "/dev/fakegpu/" + uuid(1) + ".fakegpu"},
		{Source: "/h/gpus/" + uuid(3) + ".fakegpu", Target: "/dev/fakegpu/" + uuid(3) + ".fakegpu"},
		{Source: "/h/lib/libvcuda.so", Target: "/usr/local/volcano-vgpu/libvcuda.so", ReadOnly: true},
		{Source: "/h/fake", Target: "/usr/local/nvidia/lib64", ReadOnly: true},
		{Source: "/h/workload", Target: "/usr/local/bin/cuda-workload", ReadOnly: true},
	}
	if diff := cmp.Diff(want, s.Mounts); diff != "" {
		t.Errorf("mounts (-want +got):\n%s", diff)
	}
	for key, want := range map[string]string{
		"FAKEGPU_DEVICES":     uuid(1) + ":81920," + uuid(3) + ":81920", // the exposed GPUs only, node order
		"FAKEGPU_DIR":         "/dev/fakegpu",
		api.EnvVisibleDevices: uuid(3) + "," + uuid(1), // the response's envs unchanged
		api.EnvConfig:         api.LimiterConfigPath,
		"LD_LIBRARY_PATH":     "/usr/local/nvidia/lib:/usr/local/nvidia/lib64",
		"LD_PRELOAD":          "", // the loader's /etc/ld.so.preload does it
	} {
		if got := s.getenv(key); got != want {
			t.Errorf("%s=%q, want %q", key, got, want)
		}
	}
	for _, tc := range []struct{ in, want string }{
		{"/var/run/vcuda/vcuda.region", "/h/c/shared/vcuda.region"},
		{"/etc/ld.so.preload", "/h/ld.so.preload"},
		{"/usr/local/nvidia/lib64/libcuda.so.1", "/h/fake/libcuda.so.1"},
	} {
		if got, ok := s.hostPathOf(tc.in); !ok || got != tc.want {
			t.Errorf("hostPathOf(%s) = %q, %t; want %q", tc.in, got, ok, tc.want)
		}
	}
	if got, ok := s.hostPathOf("/var/run/vcudaX"); ok {
		t.Errorf("hostPathOf matched a sibling of a mount: %q", got)
	}
}

func TestBuildSpecRefusesRelativeMounts(t *testing.T) {
	r := response(uuid(0))
	r.Mounts = append(r.Mounts, kubeletemu.Mount{ContainerPath: "etc/x", HostPath: "/h/x"})
	_, err := buildSpec(Container{Node: "n", NodeGPUs: fourGPUs(), Response: r}, hostPaths{DriverDir: "/d", Workload: "/w", GPUDir: "/g"})
	if err == nil || !strings.Contains(err.Error(), "absolute") {
		t.Errorf("error %v, want one about absolute paths", err)
	}
}

func TestFromRecord(t *testing.T) {
	a, b := response(uuid(0)), kubeletemu.AllocateResponse{Envs: map[string]string{"OTHER": "1"}, Mounts: []kubeletemu.Mount{{ContainerPath: "/x", HostPath: "/y"}}}
	rec := kubeletemu.Record{PodUID: "uid", Namespace: "ns", Name: "pod", Node: "n", Admitted: true, Containers: []kubeletemu.ContainerRecord{
		{Name: "init", Init: true, Response: &a},
		{Name: "main", Resource: "volcano.sh/vgpu-number", Response: &a},
		{Name: "main", Resource: "example.com/other", Response: &b},
	}}
	c, err := FromRecord(rec, "main", fourGPUs())
	if err != nil {
		t.Fatal(err)
	}
	if c.Node != "n" || c.PodUID != "uid" || c.Name != "main" || len(c.Response.Mounts) != 5 || c.Response.Envs["OTHER"] != "1" || c.Response.Envs[api.EnvVisibleDevices] != uuid(0) {
		t.Errorf("responses of both resources not merged: %+v", c)
	}
	if _, err := FromRecord(rec, "sidecar", fourGPUs()); err == nil || !strings.Contains(err.Error(), `container "sidecar"`) {
		t.Errorf("missing container: error %v", err)
	}
}

func TestMIGDevices(t *testing.T) {
	prof := func(name string, mem int64) api.MIGProfile {
		return api.MIGProfile{Name: name, MemoryMiB: mem}
	}
	inv := api.Inventory{GPUs: []api.GPU{
		{UUID: uuid(0)},
		{UUID: uuid(1), MIG: &api.MIG{Profiles: []api.MIGProfile{prof("1g.5gb", 4864), prof("3g.20gb", 19968)}, Instances: []api.MIGInstance{
			{Profile: "3g.20gb", Placement: api.MIGPlacement{Start: 4, Size: 4}, UUID: "MIG-a"},
			{Profile: "1g.5gb", Placement: api.MIGPlacement{Start: 0, Size: 1}}, // no compute instance: no MIG device
			{Profile: "1g.5gb", Placement: api.MIGPlacement{Start: 1, Size: 1}, UUID: "MIG-b"},
		}}},
	}}
	want := []GPU{{"MIG-a", 19968}, {"MIG-b", 4864}}
	if d := cmp.Diff(want, MIGDevices(inv)); d != "" {
		t.Errorf("MIG devices (-want +got):\n%s", d)
	}
}
