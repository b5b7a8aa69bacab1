package plugin

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/volcano-vgpu/volcano-vgpu/api"
	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/cdi"
	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/config"
	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/metrics"
	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/migledger"
	"github.com/volcano-vgpu/volcano-vgpu/e2e/sim/nvmlsim"
)

// instances is what the inventory publishes of GPU 2's MIG instances.
func (e *testEnv) instances(t *testing.T) []api.MIGInstance {
	t.Helper()
	m := e.p.Inventory().GPUs[2].MIG
	if m == nil {
		t.Fatal("GPU 2 publishes no MIG state")
	}
	return m.Instances
}

// instanceAt is the MIG UUID of GPU 2's instance at start+size ("" none).
func (e *testEnv) instanceAt(t *testing.T, start, size int) string {
	t.Helper()
	for _, in := range e.instances(t) {
		if in.Placement == (api.MIGPlacement{Start: start, Size: size}) {
			return in.UUID
		}
	}
	return ""
}

// createInSim makes a GPU instance with its compute instance on GPU 2
// behind the plugin's back (another tool, or a state the plugin has not
// read yet).
func createInSim(t *testing.T, e *testEnv, profile, ciProfile, start, size int) {
	t.Helper()
	h, _ := e.sim.DeviceGetHandleByIndex(2)
	info, _ := h.GetGpuInstanceProfileInfo(profile)
	gi, ret := h.CreateGpuInstanceWithPlacement(&info, &nvml.GpuInstancePlacement{Start: uint32(start), Size: uint32(size)})
	if ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	ci, _ := gi.GetComputeInstanceProfileInfo(ciProfile, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
	if _, ret := gi.CreateComputeInstance(&ci); ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
}

func TestAllocateCreatesMIGInstance(t *testing.T) {
	for _, cdiOn := range []bool{true, false} {
		t.Run(map[bool]string{true: "CDI", false: "env"}[cdiOn], func(t *testing.T) {
			e, _ := migEnv(t, func(c *config.Config) { c.CDI.Enabled = &cdiOn })
			// 1g.5gb at slice 2: nothing there yet (the 3g.20gb holds 4-7)
			e.add(t, pod("p-mig").app("main", migShare(2, "1g.5gb", 4864, 2, 1, "")).obj(t, e))
			e.kubelet.set("p-mig", map[string][]string{"main": nil})
			writeToolkitSpec(t, e, "kind: nvidia.com/gpu\ndevices: [{name: all, containerEdits: {deviceNodes: [{path: /dev/nvidia0}]}}]\n"+
				"containerEdits:\n  env: [NVIDIA_VISIBLE_DEVICES=void, NVIDIA_CTK_LIBCUDA_DIR=/usr/lib64]\n"+
				"  deviceNodes: [{path: /dev/nvidiactl}, {path: /dev/nvidia-uvm-tools}]\n"+
				"  mounts: [{hostPath: /usr/lib64/libcuda.so.1, containerPath: /usr/lib64/libcuda.so.1, options: [ro, bind]}]\n"+
				"  hooks: [{hookName: createContainer, path: /usr/bin/nvidia-cdi-hook, args: [nvidia-cdi-hook, update-ldcache]}]\n")
			r, err := e.p.Allocate(context.Background(), []string{e.id(2, 0)})
			if err != nil {
				t.Fatal(err)
			}
			mig := e.instanceAt(t, 2, 1)
			if !strings.HasPrefix(mig, "MIG-") {
				t.Fatalf("inventory instances %+v: no MIG device at 2+1", e.instances(t))
			}
			if cdiOn {
				// the plugin's own spec names the new instance (the toolkit's lacks it)
				if got, want := cdiNames(r), []string{"volcano-vgpu.io/mig=uid-p-mig_main_" + mig, "volcano-vgpu.io/limiter=uid-p-mig_main"}; !slices.Equal(got, want) {
					t.Errorf("CDI devices = %q, want %q", got, want)
				}
				if v := r.Envs[EnvVisibleDevices]; v != VisibleDevicesVoid {
					t.Errorf("%s = %q, want void in CDI mode", EnvVisibleDevices, v)
				}
				sp, err := cdi.Specs{Dir: e.cfg.CDI.SpecDir}.ReadMIG("uid-p-mig", "main")
				if err != nil {
					t.Fatal(err)
				}
				// GPU 2 (minor 2); the 3g.20gb made first is GPU instance 1, this one 2
				node := func(p string) cdi.DeviceNode { return cdi.DeviceNode{Path: p} }
				want := cdi.Spec{CDIVersion: cdi.Version, Kind: cdi.MIGKind, Devices: []cdi.Device{{Name: "uid-p-mig_main_" + mig, ContainerEdits: cdi.ContainerEdits{
					Env: []string{"NVIDIA_VISIBLE_DEVICES=" + mig},
					DeviceNodes: []cdi.DeviceNode{node("/dev/nvidia2"), node(fmt.Sprintf("/dev/nvidia-caps/nvidia-cap%d", nvmlsim.MIGMinor(2, 2, -1))),
						node(fmt.Sprintf("/dev/nvidia-caps/nvidia-cap%d", nvmlsim.MIGMinor(2, 2, 0))), node("/dev/nvidiactl"), node("/dev/nvidia-uvm")},
				}}},
					// the toolkit spec's own edits: the driver's library and hook, its
					// control nodes but those the device has; not its devices' edits
					ContainerEdits: &cdi.ContainerEdits{Env: []string{"NVIDIA_CTK_LIBCUDA_DIR=/usr/lib64"},
						DeviceNodes: []cdi.DeviceNode{node("/dev/nvidia-uvm-tools")},
						Hooks:       []cdi.Hook{{HookName: "createContainer", Path: "/usr/bin/nvidia-cdi-hook", Args: []string{"nvidia-cdi-hook", "update-ldcache"}}},
						Mounts:      []cdi.Mount{{HostPath: "/usr/lib64/libcuda.so.1", ContainerPath: "/usr/lib64/libcuda.so.1", Options: []string{"ro", "bind"}}}}}
				if d := cmp.Diff(want, sp); d != "" {
					t.Errorf("MIG CDI spec (-want +got):\n%s", d)
				}
			} else if v := r.Envs[EnvVisibleDevices]; v != mig {
				t.Errorf("%s = %q, want the MIG device %s", EnvVisibleDevices, v, mig)
			}
			// memory capped at the profile's, no compute throttle inside the instance
			lim := readLimiter(t, r)
			want := []api.DeviceShare{{UUID: mig, MemoryMiB: 4864, Cores: 0, MIG: &api.MIGDevice{Profile: "1g.5gb", Placement: api.MIGPlacement{Start: 2, Size: 1}, UUID: mig}}}
			if d := cmp.Diff(want, lim.Devices); d != "" || lim.Policy != api.ComputeNone {
				t.Errorf("limiter policy %s (want none), devices (-want +got):\n%s", lim.Policy, d)
			}
			// the ledger, on disk, says the plugin made it for the pod
			l, err := migledger.Load(filepath.Join(e.cfg.StateDir, migledger.File))
			if err != nil {
				t.Fatal(err)
			}
			wantLedger := []migledger.Entry{{GPU: e.gpu(2), Profile: "1g.5gb", Placement: api.MIGPlacement{Start: 2, Size: 1}, UUID: mig, PodUID: "uid-p-mig", Created: true}}
			if d := cmp.Diff(wantLedger, l.Entries()); d != "" {
				t.Errorf("ledger (-want +got):\n%s", d)
			}
			// kept out of the compute controller and the memory guard
			if ts, _ := e.p.tenancies(); len(ts) != 0 {
				t.Errorf("compute tenancies = %+v, want none for a MIG container", ts)
			}
			if mt := e.p.memTenants(); len(mt) != 0 {
				t.Errorf("memory guard tenants = %+v, want none for a MIG container", mt)
			}
		})
	}
}

func TestAllocateMIGTakesOverIdleInstance(t *testing.T) {
	e, migUUID := migEnv(t, nil)
	e.add(t, pod("p-mig").app("main", migShare(2, "3g.20gb", 19968, 4, 4, migUUID)).obj(t, e))
	e.kubelet.set("p-mig", map[string][]string{"main": nil})
	r, err := e.p.Allocate(context.Background(), []string{e.id(2, 0)})
	if err != nil {
		t.Fatal(err)
	}
	if got := readLimiter(t, r).Devices[0].UUID; got != migUUID {
		t.Errorf("limiter device %s, want the existing instance %s", got, migUUID)
	}
	if n := len(e.instances(t)); n != 1 {
		t.Errorf("%d instances, want the one that was there", n)
	}
	if en, _ := e.p.migs.Get(migledger.Key{GPU: e.gpu(2), Placement: api.MIGPlacement{Start: 4, Size: 4}}); en.Created || en.PodUID != "uid-p-mig" {
		t.Errorf("ledger entry %+v: want the pod's, not created by the plugin", en)
	}
}

func TestAllocateMIGRefusals(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name  string
		edit  func(*config.Config)
		share shareSpec
		setup func(t *testing.T, e *testEnv, migUUID string)
		is    error
		want  string
	}{
		{name: "a share of the MIG GPU", share: shareSpec{gpu: 2, mem: 1024, cores: 10}, is: ErrMIGNotServed,
			want: `container "main" is assigned a share of GPU %2, which is in MIG mode`},
		{name: "a MIG instance of a time-sliced GPU", share: migShare(1, "1g.5gb", 4864, 0, 1, ""), is: ErrMIGNotServed,
			want: "which this device plugin does not serve in mode mig"},
		{name: "a profile the GPU lacks", share: migShare(2, "2g.20gb", 19968, 0, 2, ""), is: ErrMIGNotServed,
			want: "the GPU has no profile 2g.20gb"},
		{name: "an illegal placement", share: migShare(2, "2g.10gb", 9728, 1, 2, ""), is: ErrMIGNotServed,
			want: "not a legal placement of 2g.10gb"},
		{name: "slices another instance holds", share: migShare(2, "1g.5gb", 4864, 5, 1, ""), is: ErrMIGNotServed,
			want: "the 3g.20gb instance at memory slices 4+4 holds those slices"},
		{name: "an instance processes run on", share: migShare(2, "3g.20gb", 19968, 4, 4, "%m"), is: ErrMIGNotServed,
			setup: func(t *testing.T, e *testEnv, migUUID string) {
				if err := e.sim.RunOnMIG(migUUID, 4242); err != nil {
					t.Fatal(err)
				}
				e.p.refreshMIG(ctx, map[string]bool{e.gpu(2): true})
			},
			want: "processes run on the instance"},
		{name: "an instance another live pod holds", share: migShare(2, "3g.20gb", 19968, 4, 4, "%m"), is: ErrMIGNotServed,
			setup: func(t *testing.T, e *testEnv, migUUID string) {
				e.add(t, pod("p-other").app("main", migShare(2, "3g.20gb", 19968, 4, 4, migUUID)).obj(t, e))
				if err := e.p.migs.Put(migledger.Entry{GPU: e.gpu(2), Profile: "3g.20gb", Placement: api.MIGPlacement{Start: 4, Size: 4}, UUID: migUUID, PodUID: "uid-p-other"}); err != nil {
					t.Fatal(err)
				}
			},
			want: "serves pod ns/p-other"},
		{name: "a fixed geometry without an instance there", share: migShare(2, "3g.20gb", 19968, 0, 4, ""), is: ErrMIGNotServed,
			edit: func(c *config.Config) { c.MIG.Models = map[string]config.Geometry{"A100": {"3g.20gb"}} },
			want: "the GPU's fixed geometry (mig.models, mig.gpus) has no instance there now"},
		{name: "NVML fails the create: the GPU fell off the bus", share: migShare(2, "2g.10gb", 9728, 0, 2, ""), is: ErrMIGCreate,
			setup: func(t *testing.T, e *testEnv, _ string) {
				if err := e.sim.FallOffBus(e.gpu(2)); err != nil {
					t.Fatal(err)
				}
			},
			want: "the 2g.10gb instance at memory slices 0+2 of GPU %2 (container \"main\"): cannot read the GPU's MIG state: GPU %2: handle: ERROR_GPU_IS_LOST"},
		{name: "NVML refuses the create", share: migShare(2, "2g.10gb", 9728, 0, 2, ""), is: ErrMIGCreate,
			setup: func(t *testing.T, e *testEnv, _ string) {
				if err := e.sim.FailMIGCreate(e.gpu(2)); err != nil {
					t.Fatal(err)
				}
			},
			want: "the 2g.10gb instance at memory slices 0+2 of GPU %2 (container \"main\"): cannot read the GPU's MIG state: GPU %2: 2g.10gb at memory slices 0+2: memory slices held by another MIG instance"},
		{name: "CDI mode without the driver's MIG minors", share: migShare(2, "2g.10gb", 9728, 0, 2, ""), is: ErrMIGNotServed,
			edit: func(c *config.Config) { c.CDI.MIGMinors = "/nonexistent/mig-minors" },
			want: "no MIG capability minors: /nonexistent/mig-minors does not exist"},
		{name: "CDI mode with a malformed toolkit spec", share: migShare(2, "2g.10gb", 9728, 0, 2, ""), is: ErrMIGNotServed,
			setup: func(t *testing.T, e *testEnv, _ string) {
				writeToolkitSpec(t, e, "kind: nvidia.com/gpu\ncontainerEdits: {mounts: notalist}\n")
			},
			want: "malformed NVIDIA CDI spec %t/nvidia.yaml"},
		{name: "slices taken behind the plugin's back since it last read them", share: migShare(2, "2g.10gb", 9728, 0, 2, ""), is: ErrMIGNotServed,
			setup: func(t *testing.T, e *testEnv, _ string) {
				createInSim(t, e, nvml.GPU_INSTANCE_PROFILE_1_SLICE, nvml.COMPUTE_INSTANCE_PROFILE_1_SLICE, 1, 1)
			},
			want: "the 1g.5gb instance at memory slices 1+1 holds those slices"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, migUUID := migEnv(t, tc.edit)
			if tc.share.mig != nil && tc.share.mig.UUID == "%m" {
				m := *tc.share.mig
				m.UUID = migUUID
				tc.share.mig = &m
			}
			if tc.setup != nil {
				tc.setup(t, e, migUUID)
			}
			e.add(t, pod("p-mig").app("main", tc.share).obj(t, e))
			e.kubelet.set("p-mig", map[string][]string{"main": nil})
			_, err := e.p.Allocate(ctx, []string{e.id(tc.share.gpu, 0)})
			want := strings.NewReplacer("%2", e.gpu(2), "%t", e.cfg.CDI.ToolkitSpecDirs[0]).Replace(tc.want)
			if !errors.Is(err, tc.is) || !strings.Contains(err.Error(), want) {
				t.Fatalf("Allocate = %v, want %v containing %q", err, tc.is, want)
			}
			if got := testutil.ToFloat64(e.p.metrics.AllocationFailures.WithLabelValues(metrics.ReasonMIG)); got != 1 {
				t.Errorf("allocation_failures_total{reason=%q} = %v, want 1", metrics.ReasonMIG, got)
			}
			if _, ok := e.p.migs.Get(migledger.Key{GPU: e.gpu(2), Placement: tc.share.mig0().Placement}); ok && tc.setup == nil {
				t.Error("a refused container's instance is in the ledger")
			}
			if pl := tc.share.mig0().Placement; tc.setup == nil && e.instanceAt(t, pl.Start, pl.Size) != "" {
				t.Errorf("a refused container's instance was created at %v", pl)
			}
		})
	}
}

// mig0 is s's MIG device, or an empty one.
func (s shareSpec) mig0() api.MIGDevice {
	if s.mig == nil {
		return api.MIGDevice{}
	}
	return *s.mig
}

func TestAllocateTimeSlicedBesideMIG(t *testing.T) {
	e, _ := migEnv(t, nil)
	e.add(t, pod("p-ts").app("main", share(0)).obj(t, e))
	e.kubelet.set("p-ts", map[string][]string{"main": nil})
	r, err := e.p.Allocate(context.Background(), []string{e.id(0, 0)})
	if err != nil {
		t.Fatal(err)
	}
	if lim := readLimiter(t, r); lim.Devices[0].UUID != e.gpu(0) || lim.Devices[0].Cores != 25 || lim.Policy == api.ComputeNone {
		t.Errorf("limiter %+v: want GPU 0's 25%% share under the compute controller", lim)
	}
}

// writeToolkitSpec writes the NVIDIA toolkit's spec (YAML) into the
// environment's toolkit spec directory.
func writeToolkitSpec(t *testing.T, e *testEnv, text string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(e.cfg.CDI.ToolkitSpecDirs[0], "nvidia.yaml"), []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}
