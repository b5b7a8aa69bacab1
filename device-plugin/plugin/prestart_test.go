package plugin

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/replica"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

func TestPreStart(t *testing.T) {
	e := newEnv(t)
	e.add(t, pod("p1").init("setup", share(1)).app("main", share(0)).obj(t, e), pod("p2").app("main", share(0)).obj(t, e))
	ctx := context.Background()
	e.kubelet.set("p1", map[string][]string{"main": nil})
	for _, ids := range [][]string{{e.id(1, 0)}, {e.id(0, 0)}} {
		if _, err := e.p.Allocate(ctx, ids); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name    string
		kubelet map[string]map[string][]string
		ids     []string
		wantErr string
	}{
		{name: "kubelet agrees", kubelet: map[string]map[string][]string{"p1": {"main": {e.id(0, 0)}}}, ids: []string{e.id(0, 0)}},
		{name: "init container: kubelet lists the pod, nobody else holds the IDs", kubelet: map[string]map[string][]string{"p1": {"main": {e.id(0, 0)}}}, ids: []string{e.id(1, 0)}},
		{
			name:    "kubelet gave the IDs to another container",
			kubelet: map[string]map[string][]string{"p1": {"main": {e.id(0, 5)}}, "p2": {"main": {e.id(0, 0)}}},
			ids:     []string{e.id(0, 0)},
			wantErr: "Allocate served " + e.id(0, 0) + " to ns/p1 container main, kubelet lists it with [" + e.id(0, 5) + "]",
		},
		{
			name:    "init container's IDs held by another pod",
			kubelet: map[string]map[string][]string{"p1": {"main": {e.id(0, 0)}}, "p2": {"main": {e.id(1, 0)}}},
			ids:     []string{e.id(1, 0)},
			wantErr: "kubelet gave them to ns/p2/main",
		},
		{name: "IDs never served", kubelet: map[string]map[string][]string{}, ids: []string{e.id(7, 7)}, wantErr: "were not served by this plugin's Allocate"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e.kubelet.pods = nil
			for p, cs := range tc.kubelet {
				e.kubelet.set(p, cs)
			}
			err := e.p.PreStart(ctx, tc.ids)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("err = %v, want it to contain %q", err, tc.wantErr)
			}
		})
	}
	e.kubelet.err = errors.New("connection refused")
	if err := e.p.PreStart(ctx, []string{e.id(0, 0)}); err == nil || !strings.Contains(err.Error(), "cannot verify") {
		t.Errorf("PreStart without kubelet: err = %v", err)
	}
}

func TestRestartRestoresAllocations(t *testing.T) {
	dir := t.TempDir()
	e := newEnvIn(t, dir)
	e.add(t, pod("p1").init("setup", share(1)).app("main", share(0)).obj(t, e))
	e.kubelet.set("p1", map[string][]string{"main": nil})
	if _, err := e.p.Allocate(context.Background(), []string{e.id(1, 0)}); err != nil {
		t.Fatal(err)
	}
	// A new plugin process on the same state directory knows that "setup"
	// was served: the next request is for "main", and PreStart still works.
	e2 := newEnvIn(t, dir)
	e2.add(t, pod("p1").init("setup", share(1)).app("main", share(0)).obj(t, e2))
	e2.kubelet.set("p1", map[string][]string{"main": nil})
	r, err := e2.p.Allocate(context.Background(), []string{e.id(0, 0)})
	if err != nil {
		t.Fatal(err)
	}
	if got := readLimiter(t, r).Container; got != "main" {
		t.Errorf("served %s after restart, want main", got)
	}
	if err := e2.p.PreStart(context.Background(), []string{e.id(1, 0)}); err != nil {
		t.Errorf("PreStart of the init container after restart: %v", err)
	}
}

func TestGCRemovesDeletedPods(t *testing.T) {
	e := newEnv(t)
	e.add(t, pod("gone").app("main", share(0)).obj(t, e), pod("stays").app("main", share(1)).obj(t, e))
	for _, p := range []struct {
		name string
		gpu  int
	}{{"gone", 0}, {"stays", 1}} {
		e.kubelet.set(p.name, map[string][]string{"main": nil})
		if _, err := e.p.Allocate(context.Background(), []string{e.id(p.gpu, 0)}); err != nil {
			t.Fatal(err)
		}
	}
	e.p.deletePod("uid-gone")
	e.p.synced = true
	e.clock.SetTime(time.Now().Add(time.Hour)) // directories are an hour old
	e.p.GC(context.Background(), time.Minute)
	if _, err := os.Stat(e.cfg.StateDir + "/containers/uid-gone"); !os.IsNotExist(err) {
		t.Errorf("state of the deleted pod still there: %v", err)
	}
	if _, err := os.Stat(e.cfg.StateDir + "/containers/uid-stays/main/vcuda.config"); err != nil {
		t.Errorf("state of the live pod removed: %v", err)
	}
}

// A GPU that falls off the bus is advertised unhealthy (kubelet and the
// inventory) for as long as NVML does not answer for it, however long that
// is, and healthy again once it answers and the quiet period passed.
func TestHealthLostThenReset(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); e.p.runHealth(ctx) }()
	defer func() { cancel(); <-done }()
	unhealthy := func() []string {
		devs, _ := e.p.Devices()
		seen := map[string]bool{}
		var out []string
		for _, d := range devs {
			if u := replica.UUID(d.ID); d.Health == pluginapi.Unhealthy && !seen[u] {
				seen[u] = true
				out = append(out, u)
			}
		}
		return out
	}
	_, changed := e.p.Devices()
	if err := e.sim.InjectXID(e.gpu(3), 43); err != nil { // application error: ignored
		t.Fatal(err)
	}
	if err := e.sim.FallOffBus(e.gpu(3)); err != nil {
		t.Fatal(err)
	}
	waitClosed(t, changed)
	if got := unhealthy(); len(got) != 1 || got[0] != e.gpu(3) {
		t.Fatalf("unhealthy = %v, want GPU 3", got)
	}
	if inv := e.p.Inventory(); inv.GPUs[3].Healthy {
		t.Error("inventory still says GPU 3 is healthy")
	}
	probe := e.cfg.Health.ProbeInterval.Duration
	for range 2 * int(e.cfg.Health.RecoveryPeriod.Duration/probe) { // twice the old fixed period
		stepWhenWaiting(e, probe)
	}
	if got := unhealthy(); len(got) != 1 {
		t.Fatalf("unhealthy after twice the quiet period without answering = %v, want GPU 3", got)
	}
	_, changed = e.p.Devices()
	if err := e.sim.Reset(e.gpu(3)); err != nil {
		t.Fatal(err)
	}
	for i := 0; i <= int(e.cfg.Health.RecoveryPeriod.Duration/probe)+1 && len(unhealthy()) > 0; i++ {
		stepWhenWaiting(e, probe)
		time.Sleep(5 * time.Millisecond)
	}
	waitClosed(t, changed)
	if got := unhealthy(); len(got) != 0 {
		t.Errorf("unhealthy after the GPU answered for the quiet period = %v", got)
	}
}

func stepWhenWaiting(e *testEnv, d time.Duration) {
	for !e.clock.HasWaiters() {
		time.Sleep(time.Millisecond)
	}
	e.clock.Step(d)
}

func waitClosed(t *testing.T, ch <-chan struct{}) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(5 * time.Second):
		t.Fatal("no change signalled")
	}
}
