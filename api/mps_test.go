package api

import (
	"os"
	"strings"
	"testing"
)

// libvcuda sets the same MPS variables from its config: the names must agree.
func TestMPSNamesMatchCHeader(t *testing.T) {
	b, err := os.ReadFile("../vcuda/include/vcuda_mps.h")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`#define VCUDA_MPS_PIPE_DIR "` + MPSPipeDir + `"`,
		`#define VCUDA_ENV_MPS_PIPE "` + EnvMPSPipeDir + `"`,
		`#define VCUDA_ENV_MPS_THREADS "` + EnvMPSThreads + `"`,
		`#define VCUDA_ENV_MPS_PINNED "` + EnvMPSPinnedMem + `"`,
	} {
		if !strings.Contains(string(b), want) {
			t.Errorf("vcuda/include/vcuda_mps.h lacks %s", want)
		}
	}
}
