//go:build e2e

package tests

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// injectFault appends a line to a simulated node's fault injection file
// (harness only: e2e/sim/nvmlsim.InjectFile, in the node's state directory).
func injectFault(t *testing.T, node, line string) {
	t.Helper()
	path := filepath.Join(shared.cl.Config.NodeDir(node), "state", "inject-xid")
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(line + "\n"); err != nil {
		t.Fatal(err)
	}
}

// pluginEndpoint GETs a path of a node's device plugin metrics server.
func pluginEndpoint(ctx context.Context, node, path string) (int, error) {
	idx := slices.Index(nodeNames(), node)
	code, _, err := httpGet(ctx, fmt.Sprintf("http://127.0.0.1:%d%s", shared.cl.Config.Ports.DevicePluginMetricsOffset+idx, path))
	return code, err
}

// waitGPUHealth waits until the node's inventory says the GPU's health.
func waitGPUHealth(t *testing.T, ctx context.Context, node, uuid string, healthy bool) {
	t.Helper()
	waitFor(t, ctx, fmt.Sprintf("%s on %s healthy=%v in the inventory", uuid, node, healthy), func() error {
		for _, g := range inventories(t, ctx)[node].GPUs {
			if g.UUID == uuid {
				if g.Healthy != healthy {
					return fmt.Errorf("healthy=%v", g.Healthy)
				}
				return nil
			}
		}
		return fmt.Errorf("not in the inventory")
	})
}

// TestScenarioGPUFallsOffTheBus: one GPU of a 4-GPU node falls off the bus
// (Xid 79, then every NVML call for it fails). The node's inventory shows it
// unhealthy and the scheduler places four exclusive pods on the three
// others only; the GPU stays unhealthy while it does not answer, well past
// the quiet period (10s here); once it answers again (a reset) it is
// healthy after the quiet period and the fourth pod runs on it. The
// plugin stays live and ready throughout.
func TestScenarioGPUFallsOffTheBus(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const node = "l4-1"
	waitNodeFree(t, ctx, node)
	ns := newNamespace(t, ctx)
	lost := inventories(t, ctx)[node].GPUs[1].UUID

	injectFault(t, node, "1 lost")
	t.Cleanup(func() { injectFault(t, node, "1 reset") }) // the GPU answers for later tests, whatever happens here
	waitGPUHealth(t, ctx, node, lost, false)

	for i := range 4 {
		p := gpuPod(ns, fmt.Sprintf("excl%d", i), node, 1, 0, 100)
		if _, err := createPods(ctx, []*corev1.Pod{p}, 1, nil); err != nil {
			t.Fatal(err)
		}
	}
	running, pending := waitSettled(t, ctx, ns, 4, 3, 5*time.Second)
	for _, p := range running {
		if g := gpusOf(t, p); slices.Contains(g, lost) {
			t.Errorf("%s was placed on the lost GPU %s", p.Name, lost)
		}
	}
	t.Logf("pending while GPU 1 is lost: %s (%s)", pending[0].Name, unschedulableMessage(pending[0]))

	// Twice the quiet period without an answer: still unhealthy.
	time.Sleep(20 * time.Second)
	waitGPUHealth(t, ctx, node, lost, false)
	for _, path := range []string{"/livez", "/readyz"} {
		if code, err := pluginEndpoint(ctx, node, path); err != nil || code != http.StatusOK {
			t.Errorf("%s of %s with a lost GPU: %d, %v; want 200", path, node, code, err)
		}
	}

	injectFault(t, node, "1 reset")
	answered := time.Now()
	waitGPUHealth(t, ctx, node, lost, true)
	t.Logf("healthy again %s after the GPU answered (quiet period 10s)", time.Since(answered).Round(100*time.Millisecond))
	running, _ = waitSettled(t, ctx, ns, 4, 4, 0)
	for _, p := range running {
		if p.Name == pending[0].Name {
			if g := gpusOf(t, p); !slices.Equal(g, []string{lost}) {
				t.Errorf("%s runs on %v, want the recovered GPU %s", p.Name, g, lost)
			}
		}
	}
}
