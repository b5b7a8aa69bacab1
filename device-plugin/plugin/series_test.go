package plugin

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/volcano-vgpu/volcano-vgpu/api"
	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/compute"
	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/config"
	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/metrics"
	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/mps"
)

var updateSeries = flag.Bool("update-series", false, "rewrite installer/testdata/series-device-plugin.txt")

// TestSeriesList: installer/testdata/series-device-plugin.txt lists the
// series the device plugin exports with a GPU whose tenant has run and every
// counter touched, so the alert rules and the dashboard can be checked
// against it (installer/promcheck). GPU 2 is in MPS mode, its daemon run by
// the plugin (this test binary as the fake control program), with a
// container, and reported failing. Two appear only on failures and are not
// listed: volcano_vgpu_gpu_probe_failures_total and
// volcano_vgpu_container_unlimited (package metrics' exposition test has
// them). -update-series rewrites the file.
func TestSeriesList(t *testing.T) {
	t.Setenv(fakeMPSEnv, "1")
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	var mpsGPU string
	e := newEnvWith(t, t.TempDir(), func(c *config.Config) {
		mpsGPU = simNode(t, testNode).GPUs[2].UUID
		c.Sharing.GPUs = map[string]api.GPUMode{mpsGPU: api.ModeMPS}
		c.MPS.ControlCommand = self
		c.MPS.ProbeTimeout.Duration = time.Minute // each command execs this test binary: slow under -race
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.p.runMPS(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
		_ = e.p.daemon(mpsGPU).Stop(context.Background())
	})
	eventually(t, "the MPS supervisor to wait on its ticker", e.clock.HasWaiters)
	e.add(t, pod("p1").app("main", shareSpec{gpu: 1, mem: 8192, cores: 50}).obj(t, e))
	e.kubelet.set("p1", map[string][]string{"main": nil})
	if _, err := e.p.Allocate(ctx, []string{e.id(1, 0)}); err != nil {
		t.Fatal(err)
	}
	e.add(t, pod("m1").app("main", shareSpec{gpu: 2, mem: 4096, cores: 30}).obj(t, e))
	e.kubelet.set("m1", map[string][]string{"main": nil})
	if _, err := e.p.Allocate(ctx, []string{e.id(2, 0)}); err != nil {
		t.Fatal(err)
	}
	e.p.reportMPS(mpsGPU, fmt.Errorf("%w: test", mps.ErrNoAnswer))
	paths, _ := e.p.store.Paths("uid-p1", "main")
	writeRegion(t, paths.Shared, 1<<30)
	writeUsage(t, paths.Shared, 100, 7)
	e.p.observe(compute.Observation{UUID: e.gpu(1), Busy: 0.5, Decisions: []compute.Decision{{Key: "uid-p1/main", Share: 0.5, Measured: 0.5}}})
	e.p.mu.Lock()
	e.p.published = func() time.Time { return time.Unix(1, 0) }
	e.p.mu.Unlock()
	e.p.metrics.AllocationFailures.WithLabelValues(metrics.ReasonNoMatch).Inc()
	e.p.metrics.PreStartFailures.Inc()
	g := e.p.guardMetrics
	l := []string{"ns", "p1", "main", e.gpu(1), "1", "A100"}
	g.Kills.WithLabelValues(l...).Inc()
	g.Held.WithLabelValues(l...).Set(1)
	g.Unowned.WithLabelValues(e.gpu(1), "1", "A100").Set(1)
	g.Errors.WithLabelValues(e.gpu(1), "list").Inc()
	g.Unlimited.WithLabelValues(l...).Set(1)
	g.UnlimitedKills.WithLabelValues(l...).Inc()
	got, err := metrics.SeriesNames(e.reg)
	if err != nil {
		t.Fatal(err)
	}
	var ours []string
	for _, n := range got {
		if strings.HasPrefix(n, "volcano_vgpu_") {
			ours = append(ours, n)
		}
	}
	path := filepath.Join("..", "..", "installer", "testdata", "series-device-plugin.txt")
	if err := metrics.SeriesFile(path, ours, *updateSeries); err != nil {
		t.Error(err)
	}
}
