package runner

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"

	pprofile "github.com/google/pprof/profile"
	"github.com/prometheus/common/expfmt"

	"github.com/volcano-vgpu/volcano-vgpu/e2e/bench/procstat"
	"github.com/volcano-vgpu/volcano-vgpu/e2e/cluster"
)

// sessionsMetric counts vc-scheduler's scheduling cycles: Volcano observes
// it once per session (runOnce), so its count is the sessions opened.
const sessionsMetric = "volcano_e2e_scheduling_latency_milliseconds"

// sessions reads how many sessions vc-scheduler has opened since it
// started, from its metrics endpoint.
func sessions(ctx context.Context, port int) (int, error) {
	url := fmt.Sprintf("http://127.0.0.1:%d/metrics", port)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, fmt.Errorf("vc-scheduler metrics: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("vc-scheduler metrics: %s: HTTP %d", url, resp.StatusCode)
	}
	return sessionCount(resp.Body)
}

// sessionCount is the session count in a Prometheus text exposition.
func sessionCount(r io.Reader) (int, error) {
	var p expfmt.TextParser
	families, err := p.TextToMetricFamilies(r)
	if err != nil {
		return 0, fmt.Errorf("vc-scheduler metrics: %w", err)
	}
	f, ok := families[sessionsMetric]
	if !ok || len(f.GetMetric()) == 0 || f.GetMetric()[0].GetHistogram() == nil {
		return 0, fmt.Errorf("vc-scheduler metrics: no histogram %s (a Volcano version that renamed it?)", sessionsMetric)
	}
	return int(f.GetMetric()[0].GetHistogram().GetSampleCount()), nil
}

// ownPrefix names the code of this repository in a profile: the vgpu
// plugin and the placement core it calls.
const ownPrefix = "github.com/volcano-vgpu/volcano-vgpu/"

// ownShare is the share of a CPU profile's samples with a frame of this
// repository's code on their stack: what the vgpu plugin itself costs the
// scheduler. Garbage collection of what it allocates runs on the runtime's
// own goroutines and is not counted.
func ownShare(path string) (float64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	p, err := pprofile.Parse(f)
	if err != nil {
		return 0, fmt.Errorf("CPU profile %s: %w", path, err)
	}
	return shareOf(p, ownPrefix)
}

// shareOf is the share of p's CPU time in samples with a function named
// with prefix anywhere on their stack.
func shareOf(p *pprofile.Profile, prefix string) (float64, error) {
	idx := -1
	for i, st := range p.SampleType {
		if st.Type == "cpu" {
			idx = i
		}
	}
	if idx < 0 {
		return 0, fmt.Errorf("not a CPU profile (sample types %v)", p.SampleType)
	}
	var total, own int64
	for _, s := range p.Sample {
		v := s.Value[idx]
		total += v
		if onStack(s, prefix) {
			own += v
		}
	}
	if total == 0 {
		return 0, nil
	}
	return float64(own) / float64(total), nil
}

func onStack(s *pprofile.Sample, prefix string) bool {
	for _, loc := range s.Location {
		for _, l := range loc.Line {
			if l.Function != nil && strings.HasPrefix(l.Function.Name, prefix) {
				return true
			}
		}
	}
	return false
}

// cpuBeside is the CPU the processes beside vc-scheduler have used so far,
// in seconds: the simulated nodes' agents (device plugins, the kubelet
// emulator), which on a real cluster run on the GPU nodes, and the API
// server with etcd. On this machine they share the scheduler's cores.
type cpuBeside struct{ NodeAgents, APIServer float64 }

func readBeside(cfg cluster.Config) cpuBeside {
	var c cpuBeside
	for _, name := range cfg.PidNames() {
		pid, alive := cfg.Pid(name)
		if !alive {
			continue
		}
		var into *float64
		switch {
		case strings.HasPrefix(name, cluster.DevicePluginName("")), strings.HasPrefix(name, cluster.EmulatorName):
			into = &c.NodeAgents
		case name == "kube-apiserver", name == "etcd":
			into = &c.APIServer
		default:
			continue
		}
		if s, err := procstat.Read(pid); err == nil {
			*into += s.CPUSeconds
		}
	}
	return c
}

func (c cpuBeside) since(before cpuBeside) cpuBeside {
	return cpuBeside{NodeAgents: c.NodeAgents - before.NodeAgents, APIServer: c.APIServer - before.APIServer}
}
