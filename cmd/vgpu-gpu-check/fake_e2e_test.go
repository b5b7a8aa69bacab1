package main

import (
	"context"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/mps"
)

// The whole orchestration on the project's fake driver: this test binary runs
// as vgpu-gpu-check on the fake libnvidia-ml.so.1, every tenant in its own pid
// and mount namespace with libvcuda.so through /etc/ld.so.preload and the
// config file, vcuda's workload standing in for PyTorch and the probe
// (testdata/fake). It checks the plumbing (caps hold on the memory rows, share
// rows measure and finish), not share accuracy: the fake's accuracy has its
// own suite (device-plugin/compute), and this machine's load would make it
// noisy here. The PyTorch stand-in takes a second to set up
// (FAKE_IMPORT_SECS), the probe's none, as PyTorch's import takes seconds:
// the start line holds a row's tenants until all are set up, and two
// tenants that run at once unlimited get the GPU between them (on the FIFO
// fake, about one solo rate together; without the line the pair read 113
// and the probe ran its measured half alone).
func TestFakeDriverEndToEnd(t *testing.T) {
	build, fake := fakeDriver(t), fakePrograms(t)
	table := filepath.Join(t.TempDir(), "table.txt")
	trace := filepath.Join(t.TempDir(), "trace")
	out := runFakeCheck(t, build, []string{"-probe", filepath.Join(fake, "probe"),
		"-use", "pytorch,probe", "-only", "memory,pair,mixed,deep", "-seconds", "2", "-cap-mib", "2048", "-deadline", "3m",
		"-scenario-timeout", "40s", "-work", t.TempDir(), "-out", table, "-trace", trace}, "FAKE_IMPORT_SECS=1")
	written, err := os.ReadFile(table)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), string(written)) {
		t.Errorf("-out holds another table than stdout:\n%s\n---\n%s", written, out)
	}
	t.Logf("the table:\n%s", out)
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`(?m)^# vgpu-gpu-check on Fake GPU 0 \(GPU-8b1c0d2e-0000-4000-8000-000000000001, 8192 MiB\)`),
		// every path held at the 2048 MiB cap: the limiter was preloaded through /etc/ld.so.preload
		// and read its cap from the bound config file
		regexp.MustCompile(`(?m)^memory +pytorch/default +2048 MiB +2048 MiB +ok `),
		regexp.MustCompile(`(?m)^memory +pytorch/async +2048 MiB +2048 MiB +ok `),
		regexp.MustCompile(`(?m)^memory +pytorch/expandable +2048 MiB +2048 MiB +ok `),
		regexp.MustCompile(`(?m)^pair +solo pytorch +100 +[0-9.]+/s +ok `),
		// two tenants at once under the node controller, each measured
		regexp.MustCompile(`(?m)^pair +pytorch 30\+60 +30\+60 +[0-9.]+\+[0-9.]+ +(ok|MISS) `),
		regexp.MustCompile(`(?m)^pair +pytorch 50\+50 +50\+50 +[0-9.]+\+[0-9.]+ +(ok|MISS) `),
		regexp.MustCompile(`(?m)^mixed +pytorch 30 \+ probe-elem 60 +30\+60 +[0-9.]+\+[0-9.]+ +(ok|MISS) `),
		// PyTorch never synchronized: its own solo row, a pair of one program, beside the probe
		regexp.MustCompile(`(?m)^deep +solo pytorch-deep +100 +[0-9.]+/s +ok `),
		regexp.MustCompile(`(?m)^deep +pytorch-deep 45\+50 +45\+50 +[0-9.]+\+[0-9.]+ +(ok|MISS) `),
		regexp.MustCompile(`(?m)^deep +pytorch-deep 50 \+ probe-elem 50 +50\+50 +[0-9.]+\+[0-9.]+ +(ok|MISS) `),
		regexp.MustCompile(`(?m)^# 21 rows: `),
		// each held tenant's GPU time two ways: one program's rows split the device's busy
		// time by their rates, and every row says what the controller attributed
		regexp.MustCompile(`(?m)^pair +pytorch 30\+60 .*; GPU time \(the device's busy time split by their rates\) [0-9.]+ \+ [0-9.]+;.*; GPU time as the controller attributed it [0-9.]+ \+ [0-9.]+;`),
		regexp.MustCompile(`(?m)^mixed +pytorch 30 \+ probe-elem 60 .*; GPU time as the controller attributed it [0-9.]+ \+ [0-9.]+;`),
		// the pairs 30+60 and 50+50, the deep 50+50 and 45+50: eight tenants
		regexp.MustCompile(`(?m)^# one program's share rows in GPU time \(the device's busy time split by their rates\): [0-8] of 8 tenants within their band$`),
	} {
		if !want.Match(out) {
			t.Errorf("table lacks %s:\n%s", want, out)
		}
	}
	for _, row := range []string{"pytorch unlimited x2", "pytorch \\+ probe-elem unlimited"} {
		m := regexp.MustCompile(`(?m)^\S+ +` + row + ` +none\+none +[0-9.]+\+[0-9.]+ +ok .*together ([0-9.]+)`).FindSubmatch(out)
		if m == nil {
			t.Errorf("table lacks the row %s:\n%s", row, out)
			continue
		}
		if v, _ := strconv.ParseFloat(string(m[1]), 64); v < 85 || v > 115 {
			t.Errorf("%s: together %.1f of a solo rate, want about 100 (the FIFO fake loses nothing to running them at once):\n%s", row, v, out)
		}
	}
	// a mix of programs has no split by rate; unlimited tenants no attribution (pooled costs)
	for _, bad := range []*regexp.Regexp{
		regexp.MustCompile(`(?m)^mixed +pytorch 30 \+ probe-elem 60 .*split by their rates`),
		regexp.MustCompile(`(?m)^\S+ +\S.* unlimited.* +none\+none .*attributed`),
	} {
		if bad.Match(out) {
			t.Errorf("table matches %s:\n%s", bad, out)
		}
	}
	for _, bad := range []string{"ERROR", "TIMEOUT", "OVER THE CAP", "skipped"} {
		if strings.Contains(string(out), bad) {
			t.Errorf("a row reads %s:\n%s", bad, out)
		}
	}
	// every share row's controller periods, each tenant under its name in the row
	for file, tenants := range map[string][]string{
		"pair-pytorch-30-60.tsv":             {"0:pytorch@30", "1:pytorch@60"},
		"mixed-pytorch-30-probe-elem-60.tsv": {"0:pytorch@30", "1:probe-elem@60"},
		"pair-pytorch-unlimited-x2.tsv":      {"0:pytorch@none", "1:pytorch@none"},
	} {
		b, err := os.ReadFile(filepath.Join(trace, file))
		if err != nil {
			t.Errorf("trace: %v", err)
			continue
		}
		for _, name := range tenants {
			// the busy time read, the tenant's decisions: 20 periods at least (100 ms a period, 2 s or more)
			if n := len(regexp.MustCompile(`(?m)^[0-9.]+\t[01]\.[0-9]{4}\t.*\t`+regexp.QuoteMeta(name)+`\t`).FindAll(b, -1)); n < 20 {
				t.Errorf("trace %s: %d periods of %s, want 20 or more:\n%s", file, n, name, b)
			}
			// held to a share beside another held one, each tenant is given a confining
			// launch slot (limiter.confineSlots, the default; -unconfined turns it off)
			if held := !strings.Contains(name, "@none"); held != regexp.MustCompile(`(?m)\t`+regexp.QuoteMeta(name)+`\t.*\t[1-9][0-9]*\ttrue$`).Match(b) {
				t.Errorf("trace %s: %s in a confining slot: %v, want %v:\n%s", file, name, !held, held, b)
			}
		}
	}
}

// fakeDriver is vcuda's build dir with the limiter, the fake driver and the
// workload; it skips the test where they cannot run.
func fakeDriver(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: runs tenants on the fake driver for tens of seconds")
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root: tenants get their own pid and mount namespaces")
	}
	build, err := filepath.Abs(filepath.Join("..", "..", "vcuda", "_build"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"libvcuda.so", "workload", "fake/libcuda.so.1", "fake/libnvidia-ml.so.1"} {
		if _, err := os.Stat(filepath.Join(build, f)); err != nil {
			t.Skipf("%v: make -C vcuda builds the limiter and the fake driver", err)
		}
	}
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("python3 runs the stand-in programs")
	}
	return build
}

// fakePrograms is the stand-ins' folder (testdata/fake).
func fakePrograms(t *testing.T) string {
	t.Helper()
	fake, err := filepath.Abs(filepath.Join("testdata", "fake"))
	if err != nil {
		t.Fatal(err)
	}
	return fake
}

// fakeEnv is the environment of the check and its tenants on the fake driver
// in build (one 8 GiB GPU), extra appended.
func fakeEnv(t *testing.T, build string, extra ...string) []string {
	return append(append(os.Environ(), asMain+"=1",
		"LD_LIBRARY_PATH="+filepath.Join(build, "fake"),
		"FAKEGPU_DIR="+t.TempDir(),
		"FAKEGPU_DEVICES=GPU-8b1c0d2e-0000-4000-8000-000000000001:8192",
		"FAKE_WORKLOAD="+filepath.Join(build, "workload")), extra...)
}

// runFakeCheck runs this test binary as vgpu-gpu-check on the fake driver,
// build's libvcuda and the stand-ins, with args and extra environment, and
// returns its table (stdout; the controller's log lines go to stderr).
func runFakeCheck(t *testing.T, build string, args []string, extra ...string) []byte {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self, append([]string{"-lib", filepath.Join(build, "libvcuda.so"), "-programs", fakePrograms(t)}, args...)...)
	cmd.Env = fakeEnv(t, build, extra...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%v:\n%s\n%s", err, out, stderr.String())
	}
	return out
}

// The mps rows on the fake driver: a fake control daemon (this test binary
// as nvidia-cuda-mps-control) in the work dir, each tenant an MPS client of
// it (the fake driver runs a client whose pipe directory holds the daemon's
// socket on its own lane at its CUDA_MPS_ACTIVE_THREAD_PERCENTAGE, set by
// libvcuda from the config), the memory cap held through an MPS client, the
// daemon stopped at the end. The shares are the fake's model of the SM split
// (30 beside 60 → 30 and 60 of solo).
func TestFakeDriverMPS(t *testing.T) {
	build, fake := fakeDriver(t), fakePrograms(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	control := filepath.Join(t.TempDir(), "nvidia-cuda-mps-control")
	if err := os.WriteFile(control, []byte("#!/bin/sh\n"+asFakeMPS+"=1 exec '"+self+"' \"$@\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	work := t.TempDir()
	out := runFakeCheck(t, build, []string{"-probe", filepath.Join(fake, "probe"),
		"-use", "pytorch,probe", "-only", "mps", "-seconds", "4", "-cap-mib", "2048", "-deadline", "3m",
		"-scenario-timeout", "40s", "-work", work, "-mps-control", control})
	t.Logf("fake driver, mps rows:\n%s", out)
	for _, want := range []*regexp.Regexp{
		// the cap holds through an MPS client (and its pinned limit is the cap)
		regexp.MustCompile(`(?m)^mps +mps pytorch/default +2048 MiB +2048 MiB +ok `),
		regexp.MustCompile(`(?m)^# 6 rows: `),
	} {
		if !want.Match(out) {
			t.Errorf("table lacks %s", want)
		}
	}
	// Each client at its SM fraction of solo. The verdict column judges ±3
	// points; the test allows ±10 (a loaded machine staggers the tenants'
	// starts), still far from what the same tenants get without MPS
	// (time-sliced, unthrottled: 30+60 → about 54+54, pytorch 30 + probe 60
	// → about 10+93 here).
	for _, tc := range []struct {
		row     string
		ceiling string
		want    [2]float64
	}{
		{`mps pytorch 30\+60 +30\+60`, "60", [2]float64{30, 60}},
		{`mps pytorch 50\+50 +50\+50`, "50", [2]float64{50, 50}},
		{`mps pytorch 30 \+ probe-elem 60 +30\+60`, "60", [2]float64{30, 60}},
	} {
		m := regexp.MustCompile(`(?m)^mps +` + tc.row + ` +([0-9.]+)\+([0-9.]+) +(ok|MISS) .*server at ` + tc.ceiling + `%`).FindSubmatch(out)
		if m == nil {
			t.Errorf("no measured row %q with its server at %s%%", tc.row, tc.ceiling)
			continue
		}
		for i := range 2 {
			got, _ := strconv.ParseFloat(string(m[i+1]), 64)
			if math.Abs(got-tc.want[i]) > 10 {
				t.Errorf("%s: tenant %d at %.1f%% of solo, want %g ± 10", tc.row, i+1, got, tc.want[i])
			}
		}
	}
	for _, bad := range []string{"ERROR", "TIMEOUT", "OVER THE CAP", "skipped", "stopping the MPS"} {
		if strings.Contains(string(out), bad) {
			t.Errorf("the table reads %s", bad)
		}
	}
	// the daemon was asked to quit: nothing answers in its pipe directory
	d := mps.New(filepath.Join(work, "mps"), "GPU-8b1c0d2e-0000-4000-8000-000000000001", control, 5*time.Second)
	if _, err := d.Control(context.Background(), "get_server_list"); err == nil {
		_ = d.Stop(context.Background())
		t.Error("the mps rows' control daemon still answers after the run")
	}
}
