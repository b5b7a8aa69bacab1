package plugin

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/volcano-vgpu/volcano-vgpu/api"
	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/config"
	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/gpu"
	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/health"
	"github.com/volcano-vgpu/volcano-vgpu/e2e/sim/nvmlsim"
)

// restart builds a new plugin on the same state directory and simulated
// NVML, as a process restart does.
func (e *testEnv) restart(t *testing.T) *testEnv {
	t.Helper()
	lib, err := gpu.New(e.sim)
	if err != nil {
		t.Fatal(err)
	}
	n := *e
	n.p, err = New(context.Background(), Options{
		Node: testNode, Client: e.client, Lib: lib, Config: e.cfg, MaxShares: e.node.GPUs[0].MaxShares,
		PodResources: e.kubelet, Limiter: jsonLimiter, Clock: e.clock,
	})
	if err != nil {
		t.Fatalf("restart: %v", err)
	}
	return &n
}

func healthyOf(inv api.Inventory) []bool {
	out := make([]bool, len(inv.GPUs))
	for i, g := range inv.GPUs {
		out[i] = g.Healthy
	}
	return out
}

func TestHealthKeptAcrossRestarts(t *testing.T) {
	e := newEnv(t)
	if err := e.sim.FallOffBus(e.gpu(2)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); e.p.runHealth(ctx) }()
	for e.p.health.Healthy(e.gpu(2)) {
		time.Sleep(time.Millisecond)
	}
	cancel()
	<-done

	// Restarted while the GPU is still lost: NVML cannot even give its
	// handle, yet it is in the inventory (from the kept description), unhealthy.
	lost := e.restart(t)
	inv := lost.p.Inventory()
	if len(inv.GPUs) != len(e.node.GPUs) || inv.GPUs[2].UUID != e.gpu(2) || inv.GPUs[2].MemoryMiB != e.node.GPUs[2].MemoryMiB {
		t.Fatalf("inventory after a restart with GPU 2 lost: %+v", inv.GPUs)
	}
	if h := healthyOf(inv); h[2] || !h[0] {
		t.Errorf("healthy = %v, want only GPU 2 unhealthy", h)
	}
	inv.Heartbeat = t0
	if _, err := api.EncodeInventory(inv); err != nil {
		t.Errorf("inventory with a lost GPU does not encode: %v", err)
	}

	// Restarted once the GPU answers: still unhealthy until its probe passes.
	if err := e.sim.Reset(e.gpu(2)); err != nil {
		t.Fatal(err)
	}
	back := e.restart(t)
	if back.p.health.Healthy(e.gpu(2)) {
		t.Fatal("a GPU unhealthy before the restart started healthy")
	}
	now := e.clock.Now().Add(e.cfg.Health.RecoveryPeriod.Duration)
	back.p.health.Probed(e.gpu(2), nil, now)
	back.p.health.Tick(now)
	if !back.p.health.Healthy(e.gpu(2)) {
		t.Errorf("the GPU did not recover after its probe passed: %+v", back.p.health.States())
	}
}

func TestUnreadableHealthStateIsMovedAsideAndEveryGPUProbed(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, health.StateFile)
	if err := os.WriteFile(path, []byte(`{"version":"v0"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	e := newEnvIn(t, dir)
	if got := e.p.health.Unhealthy(); len(got) != len(e.node.GPUs) {
		t.Errorf("unhealthy = %v, want every GPU until its first probe", got)
	}
	if b, err := os.ReadFile(path + ".bad"); err != nil || string(b) != `{"version":"v0"}` {
		t.Errorf("the unreadable state was not kept aside: %q, %v", b, err)
	}
	e.p.health.Probed(e.gpu(0), nil, t0)
	if got := e.p.health.Tick(t0); len(got) != 1 {
		t.Errorf("recovered after the first probe: %v, want GPU 0", got)
	}
}

func TestDiscoveryWithALostGPUNeverSeenBefore(t *testing.T) {
	node := simNode(t, testNode)
	sim := nvmlsim.New(node)
	if err := sim.FallOffBus(node.GPUs[1].UUID); err != nil {
		t.Fatal(err)
	}
	lib, err := gpu.New(sim)
	if err != nil {
		t.Fatal(err)
	}
	cfg := e0Config(t)
	p, err := New(context.Background(), Options{Node: testNode, Client: nil, Lib: lib, Config: cfg, MaxShares: 4, Limiter: jsonLimiter})
	if err != nil {
		t.Fatalf("one lost GPU failed the plugin: %v", err)
	}
	if n := len(p.Inventory().GPUs); n != len(node.GPUs)-1 || p.unnamed != 1 {
		t.Errorf("%d GPUs offered, %d unnamed; want %d and 1 (it cannot be named)", n, p.unnamed, len(node.GPUs)-1)
	}
}

func e0Config(t *testing.T) config.Config {
	c := config.Default()
	c.StateDir = t.TempDir()
	return c
}
