package main

import (
	"errors"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/memguard"
)

func TestGuardVerdict(t *testing.T) {
	kill := memguard.Kill{PID: 4242, ProcessBytes: 4096 << 20,
		Holding: memguard.Holding{HeldBytes: 7168 << 20, Processes: 2, LimitBytes: 6208 << 20}}
	for _, tc := range []struct {
		name   string
		g      guardOutcome
		status status
		note   string
	}{
		{"the tamperer killed, the first kept", guardOutcome{firstMiB: 3072, kills: []memguard.Kill{kill}, killedTamperer: true, after: 1500 * time.Millisecond},
			"", "held 7168 MiB by NVML (limit 6208 MiB with 2 processes' contexts and the tolerance); killed pid 4242 holding 4096 MiB, 1.5 s after it started; the first process (3072 MiB by NVML) kept"},
		{"nothing killed: the cap is lifted", guardOutcome{tampererErr: nil},
			statusOver, "the tamperer was not killed (it ended: <nil>)"},
		{"the process within the cap killed", guardOutcome{kills: []memguard.Kill{kill}, killedFirst: true, tampererErr: errors.New("exit status 1")},
			statusMiss, "killed the process within the cap"},
		{"a preloaded probe read as running without libvcuda", guardOutcome{kills: []memguard.Kill{kill}, killedTamperer: true, unlimited: []memguard.Unlimited{{PID: 4240}}},
			statusMiss, "the guard found pid 4240 without libvcuda, which every probe loads"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := guardVerdict(tc.g)
			if r.Status != tc.status || !strings.HasPrefix(r.Note, tc.note) || r.Target != "4096 MiB" {
				t.Errorf("got %q %q (target %s), want status %q and a note starting %q", r.Status, r.Note, r.Target, tc.status, tc.note)
			}
		})
	}
}

// TestFakeDriverGuard: the guard row on the fake driver, its tenants in their
// own pid and mount namespaces as on the GPU machine: the tamperer (the
// probe's stand-in, after removing libvcuda's shared files) holds 4096 MiB
// beside the first's 3072 under a 4096 MiB cap, and the memory guard on the
// fake NVML kills it, not the first.
func TestFakeDriverGuard(t *testing.T) {
	build, fake := fakeDriver(t), fakePrograms(t)
	out := runFakeCheck(t, build, []string{"-probe", filepath.Join(fake, "probe"), "-use", "probe", "-only", "guard", "-deadline", "2m"})
	t.Logf("\n%s", out)
	re := regexp.MustCompile(`(?m)^guard +memory guard, probe/malloc +4096 MiB +\d+ MiB +ok .*killed pid \d+ holding 4096 MiB, [0-9.]+ s after it started; the first process \(3072 MiB by NVML\) kept`)
	if !re.Match(out) {
		t.Errorf("no ok guard row matching %s", re)
	}
}
