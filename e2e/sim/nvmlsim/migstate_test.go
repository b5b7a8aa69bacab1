package nvmlsim

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/google/go-cmp/cmp"
)

// createMIG makes a GPU instance of profile constant c at start+size on
// GPU 0 with a compute instance spanning it and returns its MIG UUID.
func createMIG(t *testing.T, sim *Sim, c, ciProfile, start, size int) string {
	t.Helper()
	d := handle(t, sim, 0)
	info := profile(t, d, c)
	gi, ret := d.CreateGpuInstanceWithPlacement(&info, &nvml.GpuInstancePlacement{Start: uint32(start), Size: uint32(size)})
	if ret != nvml.SUCCESS {
		t.Fatalf("create GPU instance: %v", ret)
	}
	ci, _ := gi.GetComputeInstanceProfileInfo(ciProfile, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
	if _, ret := gi.CreateComputeInstance(&ci); ret != nvml.SUCCESS {
		t.Fatalf("create compute instance: %v", ret)
	}
	mig, ret := d.GetMigDeviceHandleByIndex(0)
	for k := 1; ret == nvml.SUCCESS; k++ {
		if id, _ := mig.GetGpuInstanceId(); id == giID(t, gi) {
			u, _ := mig.GetUUID()
			return u
		}
		mig, ret = d.GetMigDeviceHandleByIndex(k)
	}
	t.Fatal("no MIG device for the new instance")
	return ""
}

func giID(t *testing.T, gi nvml.GpuInstance) int {
	t.Helper()
	info, ret := gi.GetInfo()
	if ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	return int(info.Id)
}

// instancesOf lists GPU 0's MIG devices as "<GPU instance ID> <MIG UUID>".
func instancesOf(t *testing.T, sim *Sim) []string {
	t.Helper()
	d := handle(t, sim, 0)
	var out []string
	for k := 0; ; k++ {
		mig, ret := d.GetMigDeviceHandleByIndex(k)
		if ret == nvml.ERROR_NOT_FOUND {
			return out
		}
		if ret != nvml.SUCCESS {
			t.Fatal(ret)
		}
		id, _ := mig.GetGpuInstanceId()
		u, _ := mig.GetUUID()
		out = append(out, fmt.Sprintf("%d %s", id, u))
	}
}

// TestPersistMIG: instances outlive the simulated NVML (a plugin restart)
// with their IDs, placements and MIG UUIDs; destroys are kept too; a new
// create after the restart gets a fresh UUID; MIG mode off at the restart
// drops the GPU's instances.
func TestPersistMIG(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state", "mig-state.json") // its directory made on the way
	node := migNode(t, "NVIDIA A100-SXM4-40GB")
	first := New(node)
	if err := first.PersistMIG(path); err != nil {
		t.Fatal(err)
	}
	a := createMIG(t, first, nvml.GPU_INSTANCE_PROFILE_3_SLICE, nvml.COMPUTE_INSTANCE_PROFILE_3_SLICE, 4, 4)
	b := createMIG(t, first, nvml.GPU_INSTANCE_PROFILE_1_SLICE, nvml.COMPUTE_INSTANCE_PROFILE_1_SLICE, 0, 1)
	before := instancesOf(t, first)

	second := New(node) // the plugin restarts
	if err := second.PersistMIG(path); err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(before, instancesOf(t, second)); d != "" || len(before) != 2 {
		t.Errorf("MIG devices after a restart (-before +after):\n%s", d)
	}
	// destroy b after the restart: its compute instance, then its GPU instance
	d := handle(t, second, 0)
	gi, ret := d.GetGpuInstanceById(2)
	if ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	ci, _ := gi.GetComputeInstanceById(0)
	if ret := ci.Destroy(); ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	if ret := gi.Destroy(); ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	c := createMIG(t, second, nvml.GPU_INSTANCE_PROFILE_2_SLICE, nvml.COMPUTE_INSTANCE_PROFILE_2_SLICE, 0, 2)
	if c == a || c == b {
		t.Errorf("a create after the restart reused MIG UUID %s", c)
	}

	third := New(node)
	if err := third.PersistMIG(path); err != nil {
		t.Fatal(err)
	}
	if got, want := instancesOf(t, third), []string{"1 " + a, "2 " + c}; !cmp.Equal(got, want) {
		t.Errorf("MIG devices after the second restart = %v, want %v (b destroyed, c made)", got, want)
	}

	off := node
	off.GPUs = append(off.GPUs[:0:0], node.GPUs...)
	off.GPUs[0].MIG = false // nvidia-smi -i 0 -mig 0 before the plugin starts again
	fourth := New(off)
	if err := fourth.PersistMIG(path); err != nil {
		t.Fatal(err)
	}
	again := New(node)
	if err := again.PersistMIG(path); err != nil {
		t.Fatal(err)
	}
	if got := instancesOf(t, again); len(got) != 0 {
		t.Errorf("MIG devices after MIG mode went off and on = %v, want none", got)
	}
}

func TestPersistMIGRefuses(t *testing.T) {
	node := migNode(t, "NVIDIA A100-SXM4-40GB")
	gpu0 := node.GPUs[0].UUID
	for _, tc := range []struct{ name, file, want string }{
		{"another version", `{"version": "v2", "gpus": []}`, `version "v2", expected "v1"`},
		{"an unknown field", `{"version": "v1", "gpus": [], "extra": 1}`, `unknown field "extra"`},
		{"a GPU of another node", `{"version": "v1", "gpus": [{"uuid": "GPU-x", "mig": true, "created": 0}]}`, "GPU GPU-x: not a GPU of node"},
		{"overlapping instances", `{"version": "v1", "gpus": [{"uuid": "` + gpu0 + `", "mig": true, "created": 2, "instances": [
			{"id": 1, "profile": "3g.20gb", "placement": {"Start": 4, "Size": 4}}, {"id": 2, "profile": "1g.5gb", "placement": {"Start": 5, "Size": 1}}]}]}`,
			"GPU instance 2 (1g.5gb at {5 1}): ERROR_INSUFFICIENT_RESOURCES"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "mig-state.json")
			if err := os.WriteFile(path, []byte(tc.file), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := New(node).PersistMIG(path); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("PersistMIG = %v, want an error saying %q", err, tc.want)
			}
		})
	}
}
