package main

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/volcano-vgpu/volcano-vgpu/e2e/cluster"
	"github.com/volcano-vgpu/volcano-vgpu/e2e/sim/simconfig"
)

// The demo's workloads: each holds this much and launches this long.
const (
	demoHoldMiB = 1024
	demoSeconds = 4
)

var demoSeries = regexp.MustCompile(`^volcano_vgpu_(container_memory_used_bytes|container_memory_limit_bytes|container_compute_share_achieved_ratio|container_compute_share_target_ratio)\{(.*)\} (\S+)$`)

// scrapeUsage reads each run's container series from its node's device
// plugin and renders them as a table.
func scrapeUsage(ctx context.Context, cfg cluster.Config, sim simconfig.File, runs []*inPod) string {
	nodes := sim.Nodes()
	var b strings.Builder
	w := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "POD\tCONTAINER\tMEMORY USED / CAP (MiB)\tACHIEVED (2 s AVERAGE) / TARGET SHARE (%)")
	for _, r := range runs {
		i := slices.IndexFunc(nodes, func(n simconfig.Node) bool { return n.Name == r.node })
		if i < 0 {
			fmt.Fprintf(w, "%s\t%s\t(node %s is not simulated)\t\n", r.pod, r.container, r.node)
			continue
		}
		v, err := containerUsage(ctx, fmt.Sprintf("http://127.0.0.1:%d/metrics", cfg.Ports.DevicePluginMetricsOffset+i), r.pod, r.container)
		if err != nil {
			fmt.Fprintf(w, "%s\t%s\t(no metrics: %v)\t\n", r.pod, r.container, err)
			continue
		}
		fmt.Fprintf(w, "%s\t%s\t%.0f / %.0f\t%.1f / %.0f\n", r.pod, r.container,
			v["container_memory_used_bytes"]/(1<<20), v["container_memory_limit_bytes"]/(1<<20),
			100*v["container_compute_share_achieved_ratio"], 100*v["container_compute_share_target_ratio"])
	}
	w.Flush()
	return b.String()
}

func containerUsage(ctx context.Context, url, pod, container string) (map[string]float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		m := demoSeries.FindStringSubmatch(sc.Text())
		if m == nil || !strings.Contains(m[2], `pod="`+pod+`"`) || !strings.Contains(m[2], `container="`+container+`"`) {
			continue
		}
		if v, err := strconv.ParseFloat(m[3], 64); err == nil {
			out[m[1]] = v
		}
	}
	return out, sc.Err()
}
