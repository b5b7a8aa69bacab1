package plugin

import (
	"os"
	"testing"

	"github.com/volcano-vgpu/volcano-vgpu/e2e/sim/mpsfake"
)

// fakeMPSEnv makes this test binary answer as nvidia-cuda-mps-control.
const fakeMPSEnv = "VGPU_TEST_FAKE_MPS_CONTROL"

func TestMain(m *testing.M) {
	if os.Getenv(fakeMPSEnv) == "1" {
		os.Exit(mpsfake.Main(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}
