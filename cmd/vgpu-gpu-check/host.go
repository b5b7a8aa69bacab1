package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/volcano-vgpu/volcano-vgpu/api"
	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/compute"
	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/containerdir"
)

// host runs tenants the way a node does.
type host struct {
	lib, work, uuid string
	nvml            nvml.Interface
	n               int
}

// prepare makes sure the paths tenants bind over exist (an empty
// /etc/ld.so.preload changes nothing for the host's processes).
func (h *host) prepare() error {
	if _, err := os.Stat(api.LdPreloadPath); os.IsNotExist(err) {
		if err := os.WriteFile(api.LdPreloadPath, nil, 0o644); err != nil {
			return err
		}
	}
	return os.MkdirAll(filepath.Dir(api.LimiterConfigPath), 0o755)
}

type tenant struct {
	etc, shared, preload string
	tenancy              compute.Tenancy
}

func (h *host) tenant(policy api.ComputePolicy, cores uint32, capMiB uint64) (*tenant, error) {
	h.n++
	dir := filepath.Join(h.work, fmt.Sprintf("t%d", h.n))
	t := &tenant{etc: filepath.Join(dir, "etc"), shared: filepath.Join(dir, "shared"), preload: filepath.Join(dir, "ld.so.preload")}
	for _, d := range []string{t.etc, t.shared} {
		if err := os.MkdirAll(d, 0o777); err != nil {
			return nil, err
		}
	}
	if err := os.WriteFile(t.preload, []byte(h.lib+"\n"), 0o644); err != nil {
		return nil, err
	}
	cfg := api.LimiterConfig{Policy: policy, PodUID: fmt.Sprintf("gpu-check-%d", h.n), PodNamespace: "gpu-check",
		PodName: fmt.Sprintf("t%d", h.n), ContainerName: "main", SharedDir: t.shared,
		Devices: []api.LimiterDevice{{UUID: h.uuid, MemoryLimitBytes: capMiB << 20, CorePercent: cores}}}
	b, err := cfg.Encode()
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(t.etc, filepath.Base(api.LimiterConfigPath)), b, 0o444); err != nil {
		return nil, err
	}
	ctl := filepath.Join(t.etc, api.ControlFile)
	if err := containerdir.CreateControl(ctl, 1); err != nil {
		return nil, err
	}
	share := float64(cores) / 100
	t.tenancy = compute.Tenancy{Tenant: compute.Tenant{Key: cfg.PodUID, Share: share, Policy: policy},
		UUID: h.uuid, Devices: 1, ControlPath: ctl, UsagePath: filepath.Join(t.shared, api.UsageFile)}
	return t, nil
}

// exec runs p in t's own pid and mount namespaces with the production paths
// bound in, and decodes its JSON line into out.
func (h *host) exec(ctx context.Context, t *tenant, p program, env []string, out any, args ...string) error {
	script := `mount --bind "$1" /etc/ld.so.preload && mount --bind "$2" /etc/vcuda && shift 2 && exec "$@"`
	argv := append([]string{"-m", "-p", "-f", "--mount-proc", "sh", "-c", script, "sh", t.preload, t.etc}, p.cmd...)
	argv = append(argv, args...)
	cmd := exec.CommandContext(ctx, "unshare", argv...)
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%v: %s", err, lastLine(stderr.String()))
	}
	for _, line := range bytes.Split(stdout.Bytes(), []byte("\n")) {
		if json.Unmarshal(line, out) == nil {
			return nil
		}
	}
	return fmt.Errorf("no JSON result in %q (stderr: %s)", stdout.String(), lastLine(stderr.String()))
}

func lastLine(s string) string {
	lines := bytes.Split(bytes.TrimSpace([]byte(s)), []byte("\n"))
	return string(lines[len(lines)-1])
}

func (h *host) memory(ctx context.Context, p program, path string, capMiB uint64) (uint64, error) {
	t, err := h.tenant(api.ComputeNone, 100, capMiB)
	if err != nil {
		return 0, err
	}
	var r struct {
		Allocated uint64 `json:"allocated_mib"`
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	err = h.exec(ctx, t, p, p.env[path], &r, "mem", path)
	return r.Allocated, err
}

// solo is p's rate alone with the limiter loaded and no compute limit.
func (h *host) solo(ctx context.Context, p program, secs float64) (float64, error) {
	t, err := h.tenant(api.ComputeNone, 100, 1<<20)
	if err != nil {
		return 0, err
	}
	var r struct{ Rate float64 }
	if err := h.exec(ctx, t, p, nil, &r, "burn", fmt.Sprint(secs)); err != nil {
		return 0, err
	}
	return r.Rate, nil
}

// shares runs one tenant per target together under the node controller and
// returns each one's rate as a percentage of solo.
func (h *host) shares(ctx context.Context, p program, targets []int, secs, solo float64) ([]float64, error) {
	ts := make([]*tenant, len(targets))
	for i, c := range targets {
		t, err := h.tenant(api.ComputeFixed, uint32(c), 1<<20)
		if err != nil {
			return nil, err
		}
		ts[i] = t
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	r := &compute.Runner{Source: &compute.NVMLSource{Lib: h.nvml}, Clock: compute.Monotonic,
		List: func() ([]compute.Tenancy, error) {
			out := make([]compute.Tenancy, len(ts))
			for i, t := range ts {
				out[i] = t.tenancy
			}
			return out, nil
		}}
	done := make(chan struct{})
	go func() { defer close(done); _ = r.Run(ctx) }()
	got := make([]float64, len(ts))
	errs := make([]error, len(ts))
	var wg sync.WaitGroup
	for i, t := range ts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var res struct{ Rate float64 }
			errs[i] = h.exec(ctx, t, p, nil, &res, "burn", fmt.Sprint(secs))
			got[i] = 100 * res.Rate / solo
		}()
	}
	wg.Wait()
	cancel()
	<-done
	for _, err := range errs {
		if err != nil {
			return got, err
		}
	}
	return got, nil
}
