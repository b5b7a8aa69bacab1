package main

import (
	"context"
	"fmt"
	"slices"
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
		v, err := cluster.PodSeries(ctx, fmt.Sprintf("http://127.0.0.1:%d/metrics", cfg.Ports.DevicePluginMetricsOffset+i), r.pod, r.container)
		if err != nil {
			fmt.Fprintf(w, "%s\t%s\t(no metrics: %v)\t\n", r.pod, r.container, err)
			continue
		}
		fmt.Fprintf(w, "%s\t%s\t%.0f / %.0f\t%.1f / %.0f\n", r.pod, r.container,
			v["volcano_vgpu_container_memory_used_bytes"]/(1<<20), v["volcano_vgpu_container_memory_limit_bytes"]/(1<<20),
			100*v["volcano_vgpu_container_compute_share_achieved_ratio"], 100*v["volcano_vgpu_container_compute_share_target_ratio"])
	}
	w.Flush()
	return b.String()
}
