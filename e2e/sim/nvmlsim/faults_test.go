package nvmlsim

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

func TestFallOffBusThenReset(t *testing.T) {
	sim := New(testNode())
	uuid := sim.Node().GPUs[1].UUID
	set, _ := sim.EventSetCreate()
	d, _ := sim.DeviceGetHandleByIndex(1)
	d.RegisterEvents(nvml.EventTypeXidCriticalError, set)

	if err := sim.FallOffBus(uuid); err != nil {
		t.Fatal(err)
	}
	if ev, ret := set.Wait(1000); ret != nvml.SUCCESS || ev.EventData != 79 || ev.Device != d {
		t.Errorf("event = %+v, %v; want Xid 79 on GPU 1", ev, ret)
	}
	calls := map[string]nvml.Return{}
	_, calls["handle by index"] = sim.DeviceGetHandleByIndex(1)
	_, calls["handle by UUID"] = sim.DeviceGetHandleByUUID(uuid)
	_, calls["memory info"] = d.GetMemoryInfo()
	_, calls["PCI info"] = d.GetPciInfo()
	_, calls["UUID"] = d.GetUUID()
	_, _, _, _, calls["remapped rows"] = d.GetRemappedRows()
	calls["register events"] = d.RegisterEvents(nvml.EventTypeXidCriticalError, set)
	for call, ret := range calls {
		if ret != nvml.ERROR_GPU_IS_LOST {
			t.Errorf("lost GPU: %s returned %v, want ERROR_GPU_IS_LOST", call, ret)
		}
	}
	if _, ret := sim.DeviceGetHandleByIndex(0); ret != nvml.SUCCESS {
		t.Errorf("the other GPU: handle %v", ret)
	}
	if err := sim.Reset(uuid); err != nil {
		t.Fatal(err)
	}
	if _, ret := d.GetMemoryInfo(); ret != nvml.SUCCESS {
		t.Errorf("after reset: memory info %v", ret)
	}
}

func TestRemapPendingUntilReset(t *testing.T) {
	sim := New(testNode())
	uuid := sim.Node().GPUs[0].UUID
	d, _ := sim.DeviceGetHandleByIndex(0)
	if err := sim.SetRemapPending(uuid); err != nil {
		t.Fatal(err)
	}
	if _, _, pending, _, ret := d.GetRemappedRows(); ret != nvml.SUCCESS || !pending {
		t.Errorf("pending = %v, %v; want true", pending, ret)
	}
	sim.Reset(uuid)
	if _, _, pending, _, _ := d.GetRemappedRows(); pending {
		t.Error("still pending after the reset")
	}
}

func TestFailEventWaits(t *testing.T) {
	sim := New(testNode())
	set, _ := sim.EventSetCreate()
	sim.FailEventWaits(nvml.ERROR_UNKNOWN)
	if _, ret := set.Wait(10); ret != nvml.ERROR_UNKNOWN {
		t.Errorf("wait = %v, want ERROR_UNKNOWN", ret)
	}
	sim.FailEventWaits(nvml.SUCCESS)
	if _, ret := set.Wait(10); ret != nvml.ERROR_TIMEOUT {
		t.Errorf("wait = %v, want ERROR_TIMEOUT", ret)
	}
}

func TestInjectFileLostAndReset(t *testing.T) {
	sim := New(testNode())
	path := filepath.Join(t.TempDir(), "inject-xid")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go InjectFile{Sim: sim, Path: path, Interval: 10 * time.Millisecond}.Run(ctx)
	appendLine := func(s string) {
		f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY|os.O_CREATE, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		f.WriteString(s)
		f.Close()
	}
	lost := func() bool { _, ret := sim.DeviceGetHandleByIndex(1); return ret == nvml.ERROR_GPU_IS_LOST }
	// Run skips what the file holds when it starts, which may be after a
	// write here: write until the effect shows (the lines are idempotent).
	until := func(what, line string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); !cond(); {
			appendLine(line)
			time.Sleep(30 * time.Millisecond)
			if time.Now().After(deadline) {
				t.Fatalf("never %s", what)
			}
		}
	}
	until("lost", "all lost\n1 lost\n", lost) // "all lost" is refused, "1 lost" applies
	if _, ret := sim.DeviceGetHandleByIndex(0); ret != nvml.SUCCESS {
		t.Errorf("GPU 0 was made lost by \"all lost\": %v", ret)
	}
	until("back", "1 reset\n", func() bool { return !lost() })
}
