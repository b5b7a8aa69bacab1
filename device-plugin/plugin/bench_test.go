package plugin

import (
	"context"
	"fmt"
	"testing"

	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/config"
)

// BenchmarkAllocate110Pods is one container's Allocate on a full node: 110
// pods bound (kubelet lists them all), 14 of them assigned the requested
// GPU; it includes the PodResources snapshot, the match, writing the
// limiter config, record and preload file, and building the response; in
// CDI mode also the container's CDI spec.
func BenchmarkAllocate110Pods(b *testing.B) {
	for _, mode := range []struct {
		name string
		cdi  bool
	}{{"cdi", true}, {"env", false}} {
		b.Run(mode.name, func(b *testing.B) {
			benchAllocate(b, func(c *config.Config) { c.CDI.Enabled = &mode.cdi })
		})
	}
}

func benchAllocate(b *testing.B, edit func(*config.Config)) {
	e := newEnvWith(b, b.TempDir(), edit)
	e.p.opts.Limiter = EncodeLimiter
	for i := range 110 {
		name := fmt.Sprintf("p%03d", i)
		bld := pod(name).app("main", share(i%8))
		if i == 0 {
			bld = bld.app("second", share(1)) // keeps the pod unfinished across iterations
		}
		e.add(b, bld.obj(b, e))
	}
	// Admit pods 1…109 as kubelet would, one at a time; p000 comes last.
	ctx := context.Background()
	for i := 1; i < 110; i++ {
		name, ids := fmt.Sprintf("p%03d", i), []string{e.id(i%8, i/8)}
		e.kubelet.set(name, map[string][]string{"main": nil})
		if _, err := e.p.Allocate(ctx, ids); err != nil {
			b.Fatal(err)
		}
		e.kubelet.set(name, map[string][]string{"main": ids})
	}
	e.kubelet.set("p000", map[string][]string{"main": nil, "second": nil})
	req := []string{e.id(0, 9)}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := e.p.Allocate(ctx, req); err != nil {
			b.Fatal(err)
		}
		e.p.mu.Lock()
		e.p.ledger.Forget("uid-p000")
		delete(e.p.records, "uid-p000")
		e.p.mu.Unlock()
	}
}
