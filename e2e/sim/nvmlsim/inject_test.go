package nvmlsim

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/volcano-vgpu/volcano-vgpu/e2e/sim/simconfig"
)

func testNode() simconfig.Node {
	f, _ := simconfig.Parse([]byte(`version: v1
nodes:
- {namePrefix: n, count: 1, cpu: "8", memory: 8Gi, pods: 10, gpuModel: L4, gpus: 2, gpuMemoryMiB: 1024, topology: pcie, maxShares: 4}`))
	return f.Nodes()[0]
}

func TestInjectFile(t *testing.T) {
	sim := New(testNode())
	set, _ := sim.EventSetCreate()
	d, _ := sim.DeviceGetHandleByIndex(1)
	d.RegisterEvents(nvml.EventTypeXidCriticalError, set)

	path := filepath.Join(t.TempDir(), "inject-xid")
	if err := os.WriteFile(path, []byte("1 79\n"), 0o644); err != nil { // before start: ignored
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go InjectFile{Sim: sim, Path: path, Interval: 10 * time.Millisecond}.Run(ctx)
	time.Sleep(50 * time.Millisecond)
	f, _ := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString("# comment\nbogus line\n1 48\n")
	f.Close()
	ev, ret := set.Wait(2000)
	if ret != nvml.SUCCESS || ev.EventData != 48 || ev.Device != d {
		t.Fatalf("event = %+v, %v; want Xid 48 on GPU 1", ev, ret)
	}
	if _, ret := set.Wait(50); ret != nvml.ERROR_TIMEOUT {
		t.Errorf("the line written before start was injected too")
	}
}

func TestGPUUUID(t *testing.T) {
	sim := New(testNode())
	for ref, want := range map[string]string{"1": sim.Node().GPUs[1].UUID, sim.Node().GPUs[0].UUID: sim.Node().GPUs[0].UUID, "all": ""} {
		if got, err := sim.GPUUUID(ref); err != nil || got != want {
			t.Errorf("GPUUUID(%q) = %q, %v; want %q", ref, got, err, want)
		}
	}
	if _, err := sim.GPUUUID("7"); err == nil {
		t.Error("GPU 7 of a 2-GPU node resolved")
	}
}
