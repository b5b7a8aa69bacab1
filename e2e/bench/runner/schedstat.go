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

// Profile parts: the keys of Result.ProfileShares. Volcano tries each task
// on nodes (PredicateNodes: every plugin's predicate) and scores the nodes
// that passed (PrioritizeNodes: every plugin's node order), per task and
// node; the garbage collector's own goroutines run beside them. The three
// are disjoint; the vgpu plugin's share inside each phase is its own part
// (garbage collection assists run inside the phases and count there).
const (
	PartPredicate     = "predicate"
	PartPredicateOurs = "predicate-ours"
	PartScore         = "score"
	PartScoreOurs     = "score-ours"
	PartGC            = "gc"
	// PartSeconds is not a share: the CPU seconds the profile sampled.
	PartSeconds = "seconds"
)

// Frames that place a sample in a part (function-name prefixes).
const (
	predicateFrame = "volcano.sh/volcano/pkg/scheduler/util.(*predicateHelper).PredicateNodes"
	scoreFrame     = "volcano.sh/volcano/pkg/scheduler/util.PrioritizeNodes"
)

// gcFrames are the roots of the garbage collector's own goroutines.
func gcFrame(fn string) bool {
	switch fn {
	case "runtime.gcBgMarkWorker", "runtime.bgsweep", "runtime.bgscavenge":
		return true
	}
	return false
}

// ProfileShares reads a CPU profile: the share of its samples with this
// repository's code on the stack (what the vgpu plugin itself costs the
// scheduler; garbage collection of what it allocates runs on the runtime's
// own goroutines and is not counted) and the shares of the profile parts.
func ProfileShares(path string) (own float64, parts map[string]float64, err error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, nil, err
	}
	defer f.Close()
	p, err := pprofile.Parse(f)
	if err != nil {
		return 0, nil, fmt.Errorf("CPU profile %s: %w", path, err)
	}
	own, parts, err = sharesOf(p, ownPrefix)
	if err == nil && parts != nil {
		parts[PartSeconds] = profiledSeconds(p)
	}
	return own, parts, err
}

// profiledSeconds is the CPU time a CPU profile sampled.
func profiledSeconds(p *pprofile.Profile) float64 {
	var ns int64
	for i, st := range p.SampleType {
		if st.Type != "cpu" {
			continue
		}
		for _, s := range p.Sample {
			ns += s.Value[i]
		}
	}
	return float64(ns) / 1e9
}

// sharesOf is the share of p's CPU time in samples with a function named
// with prefix anywhere on their stack, and the shares of the parts.
func sharesOf(p *pprofile.Profile, prefix string) (float64, map[string]float64, error) {
	idx := -1
	for i, st := range p.SampleType {
		if st.Type == "cpu" {
			idx = i
		}
	}
	if idx < 0 {
		return 0, nil, fmt.Errorf("not a CPU profile (sample types %v)", p.SampleType)
	}
	var total, own int64
	sums := map[string]int64{}
	for _, s := range p.Sample {
		v := s.Value[idx]
		total += v
		var ours, pred, score, gc bool
		for _, loc := range s.Location {
			for _, l := range loc.Line {
				if l.Function == nil {
					continue
				}
				fn := l.Function.Name
				ours = ours || strings.HasPrefix(fn, prefix)
				pred = pred || strings.HasPrefix(fn, predicateFrame)
				score = score || strings.HasPrefix(fn, scoreFrame)
				gc = gc || gcFrame(fn)
			}
		}
		if ours {
			own += v
		}
		switch {
		case pred:
			sums[PartPredicate] += v
			if ours {
				sums[PartPredicateOurs] += v
			}
		case score:
			sums[PartScore] += v
			if ours {
				sums[PartScoreOurs] += v
			}
		case gc:
			sums[PartGC] += v
		}
	}
	if total == 0 {
		return 0, nil, nil
	}
	parts := make(map[string]float64, len(sums))
	for k, v := range sums {
		parts[k] = float64(v) / float64(total)
	}
	return float64(own) / float64(total), parts, nil
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
