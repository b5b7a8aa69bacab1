package simnode

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/volcano-vgpu/volcano-vgpu/api"
	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/gpu"

	"github.com/volcano-vgpu/volcano-vgpu/e2e/sim/simconfig"
	"github.com/volcano-vgpu/volcano-vgpu/e2e/sim/simconfig/simtest"
)

// openNode opens n's simulated GPUs (shut down when the test ends) and lists them.
func openNode(t *testing.T, n simconfig.Node, xid Xid, migState string) (gpu.DeviceLib, int, []gpu.Device) {
	t.Helper()
	lib, shares, err := Open(t.Context(), n, xid, migState)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(lib.Shutdown)
	devs, err := lib.Devices()
	if err != nil {
		t.Fatal(err)
	}
	return lib, shares, devs
}

func TestOpenListsTheNodesGPUs(t *testing.T) {
	n := simtest.LocalNode(t, "a100-40g-1")
	_, shares, devs := openNode(t, n, Xid{}, "")
	var got, want []string
	for _, d := range devs {
		got = append(got, d.UUID)
	}
	for _, g := range n.GPUs {
		want = append(want, g.UUID)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("GPU UUIDs (-file +library):\n%s", diff)
	}
	if shares != n.GPUs[0].MaxShares {
		t.Errorf("max shares = %d, want the file's %d", shares, n.GPUs[0].MaxShares)
	}
}

func TestOpenRefusesANodeWithoutGPUs(t *testing.T) {
	if _, _, err := Open(t.Context(), simconfig.Node{Name: "cpu-0"}, Xid{}, ""); err == nil {
		t.Fatal("Open of a node without GPUs succeeded")
	}
}

func TestOpenInjectsXidsFromTheFile(t *testing.T) {
	n := simtest.LocalNode(t, "l4-0")
	path := filepath.Join(t.TempDir(), "inject-xid")
	lib, _, devs := openNode(t, n, Xid{File: path, Interval: 10 * time.Millisecond}, "")
	events, err := lib.Events(devs)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond) // the follower starts at the file's end
	if err := os.WriteFile(path, []byte(n.GPUs[1].UUID+" 79\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		ev, err := events.Wait(100)
		if errors.Is(err, gpu.ErrTimeout) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if ev.UUID != n.GPUs[1].UUID || ev.XID != 79 {
			t.Fatalf("event = %+v, want Xid 79 on %s", ev, n.GPUs[1].UUID)
		}
		return
	}
	t.Fatal("no Xid event within 5s of writing the injection file")
}

// TestOpenKeepsMIGInstances: with a MIG state file, a second Open (the
// plugin restarted) reads the instance the first one created.
func TestOpenKeepsMIGInstances(t *testing.T) {
	n, err := simtest.LocalNode(t, "a100-40g-1").WithMIG("--mig-gpus", []int{7})
	if err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(t.TempDir(), "sim-mig-state.json")
	lib, _, devs := openNode(t, n, Xid{}, state)
	at := api.MIGPlacement{Start: 2, Size: 2}
	mig, err := lib.(gpu.MIGManager).CreateMIG(devs[7].UUID, "1g.10gb", at)
	if err != nil {
		t.Fatal(err)
	}
	again, _, _ := openNode(t, n, Xid{}, state)
	m, err := again.MIG(devs[7].UUID)
	if err != nil {
		t.Fatal(err)
	}
	if want := []api.MIGInstance{{Profile: "1g.10gb", Placement: at, UUID: mig}}; !cmp.Equal(want, m.Instances) {
		t.Errorf("instances after a restart = %+v, want %+v", m.Instances, want)
	}
}
