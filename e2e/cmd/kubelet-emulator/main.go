// Command kubelet-emulator plays kubelet's device manager for nodes without
// a kubelet (kwok nodes): registration, ListAndWatch with node capacity,
// GetPreferredAllocation/Allocate/PreStartContainer for every pod bound to
// its nodes, PodResources, and a JSON record per pod. See package
// e2e/kubeletemu for what it emulates and what it does not.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/klog/v2"

	"github.com/volcano-vgpu/volcano-vgpu/e2e/kubeletemu"
	"github.com/volcano-vgpu/volcano-vgpu/e2e/sim/simconfig"
	"github.com/volcano-vgpu/volcano-vgpu/kubeclient"
)

func main() {
	klog.InitFlags(nil)
	pflag.CommandLine.AddGoFlagSet(flag.CommandLine) // klog's -v, --vmodule, …
	kubeconfig := pflag.String("kubeconfig", "", "kubeconfig file; empty uses the in-cluster config")
	baseDir := pflag.String("base-dir", "", "directory holding one subdirectory per node (required; keep it short: socket paths are limited to 107 bytes)")
	nodes := pflag.StringSlice("nodes", nil, "node names to serve")
	nodesFrom := pflag.String("nodes-from", "", "serve every node of this simulated-cluster file (e2e/sim/clusters/*.yaml) (in addition to --nodes)")
	resources := pflag.StringSlice("resources", []string{"volcano.sh/vgpu-number"}, "device-plugin resources a pod may request before its plugin registers")
	registerWait := pflag.Duration("register-wait", 30*time.Second, "how long admission waits for a requested resource's plugin to (re-)register")
	pflag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	ctx = klog.NewContext(ctx, klog.Background().WithName("kubelet-emulator"))
	if err := run(ctx, *kubeconfig, *baseDir, *nodes, *nodesFrom, *resources, *registerWait); err != nil {
		klog.FromContext(ctx).Error(err, "kubelet-emulator failed")
		klog.Flush()
		os.Exit(1)
	}
	klog.Flush()
}

func run(ctx context.Context, kubeconfig, baseDir string, nodes []string, nodesFrom string, resources []string, wait time.Duration) error {
	if baseDir == "" {
		return errors.New("--base-dir is required")
	}
	if nodesFrom != "" {
		f, err := simconfig.Load(nodesFrom)
		if err != nil {
			return fmt.Errorf("--nodes-from: %w", err)
		}
		for _, n := range f.Nodes() {
			nodes = append(nodes, n.Name)
		}
	}
	if len(nodes) == 0 {
		return errors.New("no nodes: pass --nodes=a,b or --nodes-from=<e2e/sim/clusters/*.yaml>")
	}
	client, err := kubeclient.New(kubeconfig, "kubelet-emulator", 50, 100)
	if err != nil {
		return err
	}
	emu, err := kubeletemu.New(kubeletemu.Options{Client: client, BaseDir: baseDir, Nodes: nodes, Resources: resources, RegisterWait: wait})
	if err != nil {
		return err
	}
	klog.FromContext(ctx).Info("Starting", "nodes", strings.Join(nodes, ","), "baseDir", baseDir)
	return emu.Run(ctx)
}
