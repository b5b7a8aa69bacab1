package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestNoHarnessInTheShippedBinary: the shipped device plugin links none of
// the test harness (e2e/, the simulated NVML, the simulated-cluster format)
// and not go-nvml's mock; the simulation build lives in
// e2e/cmd/vgpu-device-plugin-sim.
func TestNoHarnessInTheShippedBinary(t *testing.T) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("no go command to list the binary's packages: %v", err)
	}
	out, err := exec.Command(gobin, "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	forbidden := []struct{ what, why string }{
		{"github.com/volcano-vgpu/volcano-vgpu/e2e/", "test harness"},
		{"nvmlsim", "simulated NVML"},
		{"simconfig", "simulated-cluster format"},
		{"github.com/NVIDIA/go-nvml/pkg/nvml/mock", "NVML mock"},
	}
	for _, pkg := range strings.Fields(string(out)) {
		for _, f := range forbidden {
			if strings.Contains(pkg, f.what) {
				t.Errorf("vgpu-device-plugin imports %s (%s); keep simulation code in e2e/", pkg, f.why)
			}
		}
	}
}
