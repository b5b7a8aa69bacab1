// Command localcluster starts, stops and describes the local test cluster.
//
//	localcluster up       start what is not running, wait until ready (idempotent)
//	localcluster down     stop every process it started, remove state
//	localcluster status   list the processes and whether they are alive
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"sort"
	"syscall"

	"k8s.io/klog/v2"

	"github.com/volcano-vgpu/volcano-vgpu/e2e/cluster"
)

func main() {
	klog.InitFlags(nil)
	flag.Usage = func() {
		fmt.Fprintf(os.Stderr, "usage: localcluster [flags] up|down|status\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() != 1 {
		flag.Usage()
		os.Exit(2)
	}
	if err := run(flag.Arg(0)); err != nil {
		fmt.Fprintln(os.Stderr, "localcluster:", err)
		os.Exit(1)
	}
}

func run(verb string) error {
	wd, err := os.Getwd()
	if err != nil {
		return err
	}
	root, err := cluster.FindRoot(wd)
	if err != nil {
		return err
	}
	cfg, err := cluster.DefaultConfig(root)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx = klog.NewContext(ctx, klog.Background())
	switch verb {
	case "up":
		cl, err := cluster.Up(ctx, cfg)
		if err != nil {
			return err
		}
		fmt.Printf(`Local Volcano cluster is ready: %d simulated GPU nodes.

  export KUBECONFIG=%s
  %s/kubectl get nodes -L %s
  %s/vcctl job list --kubeconfig $KUBECONFIG
  logs: %s/logs    stop: make cluster-down
`, len(cl.Nodes), cfg.Kubeconfig(), cfg.BinDir, cluster.LabelGPUModel, cfg.BinDir, cfg.StateDir)
	case "down":
		return cluster.Down(ctx, cfg)
	case "status":
		st := cluster.Status(cfg)
		names := make([]string, 0, len(st))
		for n := range st {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			state := "running"
			if !st[n] {
				state = "DEAD (stale pid file: run `make cluster` to restart it)"
			}
			fmt.Printf("%-28s %s\n", n, state)
		}
		if len(names) == 0 {
			fmt.Println("no local cluster (start one with `make cluster`)")
		}
	default:
		return fmt.Errorf("unknown command %q: expected up, down or status", verb)
	}
	return nil
}
