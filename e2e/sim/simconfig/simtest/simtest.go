// Package simtest gives tests the simulated nodes of e2e/sim/clusters/local.yaml.
package simtest

import (
	"path/filepath"
	"runtime"
	"testing"

	"github.com/volcano-vgpu/volcano-vgpu/e2e/sim/simconfig"
)

// LocalNode returns the named node of e2e/sim/clusters/local.yaml or fails t.
func LocalNode(t testing.TB, name string) simconfig.Node {
	t.Helper()
	_, here, _, _ := runtime.Caller(0)
	f, err := simconfig.Load(filepath.Join(filepath.Dir(here), "..", "..", "clusters", "local.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	n, ok := f.Find(name)
	if !ok {
		t.Fatalf("no node %s in e2e/sim/clusters/local.yaml", name)
	}
	return n
}
