package main

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"
)

// The tenants' sources. The gpu bundle carries them as files (programs/);
// `go run` uses these copies.
//
//go:embed programs/torch_check.py programs/cupy_check.py programs/vgpu_start.py programs/probe.cu programs/slicing.cu
var programSources embed.FS

// program is a CUDA program the check runs as a tenant; see the comment at
// the top of each source for its modes (version, ctx, mem, burn, elem).
type program struct {
	name    string
	cmd     []string
	env     map[string][]string // extra environment per memory path
	version string              // for the table's header
	missing string              // why it cannot run here; "" when it can
}

// workArgs is the mode a workload runs in.
func workArgs(work string, secs float64) []string {
	switch work {
	case "probe-elem":
		return []string{"elem", fmt.Sprint(secs)}
	case "pytorch-deep":
		return []string{"burn", fmt.Sprint(secs), "0"} // never synchronized
	}
	return []string{"burn", fmt.Sprint(secs)}
}

// source is the path of a program's source: in -programs when given, else
// the built-in copy written to work.
func source(dir, work, name string) (string, error) {
	if dir != "" {
		p := filepath.Join(dir, name)
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("%w (-programs must be the bundle's programs/ folder)", err)
		}
		return p, nil
	}
	b, err := programSources.ReadFile("programs/" + name)
	if err != nil {
		return "", err
	}
	p := filepath.Join(work, name)
	return p, os.WriteFile(p, b, 0o644)
}

// findPrograms looks for every program in o.use; one that cannot run here
// comes back with missing set, so its rows are reported as skipped.
func findPrograms(ctx context.Context, o options, work string) map[string]*program {
	out := map[string]*program{}
	py, pyErr := exec.LookPath("python3")
	for _, name := range o.use {
		p := &program{name: name}
		out[name] = p
		switch name {
		case "pytorch", "cupy":
			file := map[string]string{"pytorch": "torch_check.py", "cupy": "cupy_check.py"}[name]
			if pyErr != nil {
				p.missing = "python3 not found"
				continue
			}
			src, err := source(o.programsDir, work, file)
			if err == nil && o.programsDir == "" {
				_, err = source("", work, "vgpu_start.py") // the start line it imports, beside it
			}
			if err != nil {
				p.missing = err.Error()
				continue
			}
			p.cmd = []string{py, src}
			if name == "pytorch" {
				p.env = map[string][]string{
					"expandable": {"PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"},
					"async":      {"PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync"}}
			}
			var v struct{ Version, Cuda string }
			if err := runJSON(ctx, time.Minute, &v, py, src, "version"); err != nil {
				p.missing = fmt.Sprintf("python3 %s version: %v", file, err)
				continue
			}
			p.version = name + " " + v.Version
			if v.Cuda != "" {
				p.version += " (CUDA " + v.Cuda + ")"
			}
		case "probe":
			p.cmd, p.missing = probe(ctx, o, work)
			p.version = "probe"
		}
	}
	return out
}

// probe finds or builds the CUDA C probe.
func probe(ctx context.Context, o options, work string) ([]string, string) {
	return cudaProgram(ctx, o, work, "probe", o.probe, "-lcuda")
}

// slicingProgram finds or builds the slicing rows' program (slicing.cu).
func slicingProgram(ctx context.Context, o options, work string) *program {
	p := &program{name: "slicing"}
	p.cmd, p.missing = cudaProgram(ctx, o, work, "slicing", o.slicing)
	return p
}

// cudaProgram finds or builds a CUDA C program: flag is its flag's value
// ("" = build name.cu here with nvcc, "off", or a built binary).
func cudaProgram(ctx context.Context, o options, work, name, flag string, libs ...string) ([]string, string) {
	switch flag {
	case "off":
		return nil, fmt.Sprintf("-%s off (run.sh: none of the rows selected needs it, nvcc is missing, or its build failed: see its log)", name)
	case "":
	default:
		if st, err := os.Stat(flag); err != nil || st.Mode()&0o111 == 0 {
			return nil, fmt.Sprintf("-%s %s is not an executable (build it: nvcc -O2 -o %s %s.cu%s)", name, flag, name, name, strings.Join(append([]string{""}, libs...), " "))
		}
		return []string{flag}, ""
	}
	nvcc, err := exec.LookPath("nvcc")
	if err != nil {
		return nil, fmt.Sprintf("nvcc not found: install the CUDA toolkit or pass -%s", name)
	}
	src, err := source(o.programsDir, work, name+".cu")
	if err != nil {
		return nil, err.Error()
	}
	bin := filepath.Join(work, name)
	cctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	args := append([]string{"-O2", "-o", bin, src}, libs...)
	if b, err := exec.CommandContext(cctx, nvcc, args...).CombinedOutput(); err != nil {
		return nil, fmt.Sprintf("nvcc %s: %v: %s", src, err, lastLine(string(b)))
	}
	return []string{bin}, ""
}

// nvccVersion is "nvcc 13.0", or "" without nvcc.
func nvccVersion(ctx context.Context) string {
	nvcc, err := exec.LookPath("nvcc")
	if err != nil {
		return ""
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	b, err := exec.CommandContext(ctx, nvcc, "--version").Output()
	if err != nil {
		return ""
	}
	if m := regexp.MustCompile(`release ([0-9.]+)`).FindSubmatch(b); m != nil {
		return "nvcc " + string(m[1])
	}
	return ""
}

// runJSON runs a command on the host and decodes the first JSON line of its
// stdout into out.
func runJSON(ctx context.Context, d time.Duration, out any, name string, args ...string) error {
	return runJSONEnv(ctx, d, nil, out, name, args...)
}

// runJSONEnv is runJSON with env added to the check's environment.
func runJSONEnv(ctx context.Context, d time.Duration, env []string, out any, name string, args ...string) error {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	if env != nil {
		cmd.Env = append(os.Environ(), env...)
	}
	cmd.WaitDelay = 5 * time.Second
	var stderr strings.Builder
	cmd.Stderr = &stderr
	b, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("%v: %s", err, lastLine(stderr.String()))
	}
	return decodeJSONLine(b, out)
}

// decodeJSONLine decodes the first line of b that is a JSON object.
func decodeJSONLine(b []byte, out any) error {
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if strings.HasPrefix(line, "{") && json.Unmarshal([]byte(line), out) == nil {
			return nil
		}
	}
	return errors.New("no JSON result in its output " + fmt.Sprintf("%q", lastLine(string(b))))
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}
