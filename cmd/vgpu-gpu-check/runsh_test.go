package main

import (
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/volcano-vgpu/volcano-vgpu/e2e/sim/mpsfake"
)

// The test binary doubles as the bundle's vgpu-gpu-check: run.sh execs it
// with this variable set, and TestMain hands it to main.
const asMain = "VGPU_GPU_CHECK_AS_MAIN"

// asFakeMPS makes the test binary answer as nvidia-cuda-mps-control
// (e2e/sim/mpsfake) for the mps rows on the fake driver.
const asFakeMPS = "VGPU_GPU_CHECK_AS_FAKE_MPS_CONTROL"

func TestMain(m *testing.M) {
	if os.Getenv(asFakeMPS) == "1" {
		os.Exit(mpsfake.Main(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
	}
	if os.Getenv(asMain) == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// bundle lays out a gpu bundle as make gpu-bundle does, with this test
// binary as vgpu-gpu-check and the programs of progs.
func bundle(t *testing.T, progs string) string {
	t.Helper()
	dir := t.TempDir()
	copyFile := func(src, dst string, mode os.FileMode) {
		in, err := os.Open(src)
		if err != nil {
			t.Fatal(err)
		}
		defer in.Close()
		out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY, mode)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(out, in); err != nil {
			t.Fatal(err)
		}
		if err := out.Close(); err != nil {
			t.Fatal(err)
		}
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	copyFile(self, filepath.Join(dir, "vgpu-gpu-check"), 0o755)
	copyFile(filepath.Join("bundle", "run.sh"), filepath.Join(dir, "run.sh"), 0o755)
	if err := os.MkdirAll(filepath.Join(dir, "programs"), 0o755); err != nil {
		t.Fatal(err)
	}
	ents, err := os.ReadDir(progs)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		copyFile(filepath.Join(progs, e.Name()), filepath.Join(dir, "programs", e.Name()), 0o755)
	}
	// the start line the Python programs import, as make gpu-bundle copies it
	copyFile(filepath.Join("programs", "vgpu_start.py"), filepath.Join(dir, "programs", "vgpu_start.py"), 0o644)
	if err := os.WriteFile(filepath.Join(dir, "libvcuda.so"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestRunSh(t *testing.T) {
	if _, err := os.Stat("/dev/nvidia0"); err == nil {
		t.Skip("this machine has a GPU: run.sh would run the whole check; these cases are for machines without one")
	}
	dir := bundle(t, "programs")
	for _, tc := range []struct {
		name     string
		args     []string
		env      []string
		wantCode int
		want     []string
		notWant  []string
	}{
		// NVML's reason depends on the machine: ERROR_LIBRARY_NOT_FOUND without the
		// driver's libraries, "Driver Not Loaded" where a CUDA toolkit installed them
		{name: "no GPU: run.sh and the check both say so and exit 0", wantCode: 0, want: []string{
			"run.sh: no NVIDIA GPU here", "gpu-check: no NVIDIA GPU here (NVML: "}},
		{name: "flags are read before looking for a GPU", args: []string{"--deadline=4m", "--only", "memory", "--use", "probe"}, wantCode: 0,
			want: []string{"run.sh: no NVIDIA GPU here"}},
		{name: "--plan prints the rows the flags select, GPU or not", args: []string{"--plan", "--only", "triple", "--seconds", "20"}, wantCode: 0,
			want: []string{"triple   solo pytorch                          25s", "triple   pytorch 20+30+40                      27s", "# 2 rows planned at 52s"}},
		{name: "--plan of the mps rows", args: []string{"--plan", "--only", "mps", "--use", "pytorch"}, wantCode: 0,
			want: []string{"mps      mps pytorch/default                   12s", "mps      mps pytorch 30+60                     18s", "# 6 rows planned at 1m3s"}},
		{name: "--skip leaves the mps rows out", args: []string{"--plan", "--only", "pair,mps", "--skip", "mps"}, wantCode: 0,
			want: []string{"pair     pytorch 50+50", "# 4 rows planned"}, notWant: []string{"mps "}},
		{name: "GPU_CHECK_SKIP=mps does the same", args: []string{"--plan", "--only", "pair,mps"}, env: []string{"GPU_CHECK_SKIP=mps"}, wantCode: 0,
			want: []string{"pair     pytorch 50+50", "# 4 rows planned"}, notWant: []string{"mps "}},
		{name: "help", args: []string{"--help"}, wantCode: 0, want: []string{"--deadline D", "--scenario-timeout D", "--only LIST", "--skip LIST", "--mps-control CMD"}},
		{name: "an unknown flag", args: []string{"--bogus", "1"}, wantCode: 2, want: []string{"run.sh: unknown flag --bogus"}},
		{name: "a flag without its value", args: []string{"--deadline"}, wantCode: 2, want: []string{"--deadline needs a value"}},
		{name: "a deadline that is not a duration", args: []string{"--deadline", "6min"}, wantCode: 2, want: []string{"use whole seconds or minutes"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command("sh", append([]string{filepath.Join(dir, "run.sh")}, tc.args...)...)
			cmd.Env = append([]string{asMain + "=1", "PATH=/usr/sbin:/usr/bin:/sbin:/bin", "HOME=" + t.TempDir()}, tc.env...)
			out, err := cmd.CombinedOutput()
			code := 0
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				code = ee.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			if code != tc.wantCode {
				t.Errorf("exit %d, want %d; output:\n%s", code, tc.wantCode, out)
			}
			for _, w := range tc.want {
				if !strings.Contains(string(out), w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
			for _, w := range tc.notWant {
				if strings.Contains(string(out), w) {
					t.Errorf("output has %q:\n%s", w, out)
				}
			}
		})
	}
}

// run.sh's GPU path on the fake driver: the flags reach the check, the table
// lands in --out, and run.sh reports it.
func TestRunShOnTheFakeDriver(t *testing.T) {
	outDir := t.TempDir()
	out := runFakeBundle(t, outDir, []string{"--only", "memory", "--use", "pytorch", "--cap-mib", "2048", "--deadline=2m", "--unconfined"})
	tables, err := filepath.Glob(filepath.Join(outDir, "gpu-check-*Z.txt"))
	if err != nil || len(tables) != 1 {
		t.Fatalf("want one table in $OUT, found %v (%v):\n%s", tables, err, out)
	}
	table, err := os.ReadFile(tables[0])
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"; deadline 1m", // what run.sh left of --deadline 2m, less 5 s (not the check's default 6m)
		"# share rows' controller: launch slots that do not confine (limiter.confineSlots: false, -unconfined)",
		"memory   pytorch/default                  2048 MiB   2048 MiB         ok",
		"memory   pytorch/async                    2048 MiB   2048 MiB         ok",
		"# 3 rows: 3 ok",
	} {
		if !strings.Contains(string(table), want) {
			t.Errorf("table lacks %q:\n%s", want, table)
		}
	}
	if !strings.Contains(string(out), "run.sh: table written to "+tables[0]) {
		t.Errorf("run.sh does not say where the table is:\n%s", out)
	}
}

// fakeNvcc stands in for nvcc in PATH: "nvcc -O2 -o OUT SRC.cu ..." makes OUT
// run SRC's stand-in beside it (testdata/fake: probe, slicing); with fail
// set, building that program fails as a compile error would.
func fakeNvcc(t *testing.T, fail string) string {
	t.Helper()
	bin := t.TempDir()
	script := `#!/bin/sh
while [ $# -gt 0 ]; do case "$1" in -o) out=$2; shift 2 ;; *.cu) src=$1; shift ;; *) shift ;; esac; done
name=$(basename "$src" .cu)
[ "$name" = "` + fail + `" ] && { echo "$src(1): error: a stand-in compile error" >&2; exit 1; }
printf '#!/bin/sh\nexec "%s" "$@"\n' "$(dirname "$src")/$name" >"$out" && chmod +x "$out"
`
	if err := os.WriteFile(filepath.Join(bin, "nvcc"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return bin
}

// run.sh builds the CUDA programs at once, each on its own (a failed build
// skips only its rows), hands them to the check, and packs the rows' traces
// into one file (a lent machine sends back a few files only).
func TestRunShBuildsAndPacks(t *testing.T) {
	for _, tc := range []struct {
		name, fail string
		want       []string
		packed     bool
	}{
		{name: "both build: the slicing rows run, their intervals packed", packed: true,
			want: []string{"slicing  back to back x2                  -          ", "# 7 rows: 7 ok"}},
		{name: "the slicing program fails to build: its rows skip, the others run", fail: "slicing",
			want: []string{"slicing  back to back x2                  -          -                skipped", "memory   pytorch/default                  2048 MiB   2048 MiB         ok"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			outDir := t.TempDir()
			out := runFakeBundle(t, outDir, []string{"--only", "memory,slicing", "--use", "pytorch", "--cap-mib", "2048", "--deadline=2m"},
				"PATH="+fakeNvcc(t, tc.fail)+":"+os.Getenv("PATH"), "FAKEGPU_SLICE_US=2000", "FAKEGPU_SWITCH_US=170")
			for _, w := range tc.want {
				if !strings.Contains(string(out), w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
			if tc.fail != "" && !strings.Contains(string(out), "run.sh: nvcc "+tc.fail+".cu failed") {
				t.Errorf("run.sh does not say the build failed:\n%s", out)
			}
			packs, _ := filepath.Glob(filepath.Join(outDir, "gpu-check-*Z.trace.tar.gz"))
			dirs, _ := filepath.Glob(filepath.Join(outDir, "gpu-check-*Z.trace"))
			if len(dirs) != 0 || (len(packs) == 1) != tc.packed {
				t.Fatalf("$OUT holds trace folders %v and packs %v, want %d pack(s) and no folder:\n%s", dirs, packs, map[bool]int{true: 1}[tc.packed], out)
			}
			if !tc.packed {
				return
			}
			list, err := exec.Command("tar", "-tzf", packs[0]).Output()
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(list), "slicing-back-to-back-x2.t1.txt") {
				t.Errorf("the pack lacks the slicing rows' intervals:\n%s", list)
			}
		})
	}
}

// runFakeBundle makes a bundle of the stand-ins (testdata/fake) with the
// fake driver's build of libvcuda.so, as make gpu-bundle copies it, runs its
// run.sh with args on the fake driver (extra environment appended, $OUT at
// outDir) and returns what it printed.
func runFakeBundle(t *testing.T, outDir string, args []string, extra ...string) []byte {
	t.Helper()
	build := fakeDriver(t)
	dir := bundle(t, filepath.Join("testdata", "fake"))
	lib, err := os.ReadFile(filepath.Join(build, "libvcuda.so"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "libvcuda.so"), lib, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("sh", append([]string{filepath.Join(dir, "run.sh")}, args...)...)
	cmd.Env = fakeEnv(t, build, append([]string{"GPU_CHECK_ASSUME_GPU=1", "OUT=" + outDir}, extra...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v:\n%s", err, out)
	}
	return out
}
