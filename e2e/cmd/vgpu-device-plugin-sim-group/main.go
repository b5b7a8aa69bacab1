// Command vgpu-device-plugin-sim-group hosts the device plugins of many
// simulated nodes in one process, so a laptop-sized machine can simulate a
// thousand nodes (one process per node costs ~60 MiB each). Every node is
// still the shipped device plugin (device-plugin/app.RunNode) on its own
// simulated NVML, with its own gRPC socket, PodResources client, state
// directory, node report and informers; the nodes share the process, its
// API client and connection. Its directories follow the local cluster's
// layout: <base-dir>/<node>/{device-plugins,pod-resources/kubelet.sock,state,cdi}.
//
// Unlike vgpu-device-plugin-sim it has no compute controller on the fake
// driver (the fake reads its devices from the environment once per
// process), and one node's plugin cannot be killed alone: scenarios that
// restart a node's plugin run one node per process.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/klog/v2"

	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/app"
	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/config"
	"github.com/volcano-vgpu/volcano-vgpu/e2e/sim/simconfig"
	"github.com/volcano-vgpu/volcano-vgpu/e2e/sim/simnode"
	"github.com/volcano-vgpu/volcano-vgpu/kubeclient"
)

// errNoNodes is returned when no node is named.
var errNoNodes = errors.New("no nodes to simulate")

// options are the command line.
type options struct {
	kubeconfig, configFile, simFile, baseDir string
	nodes                                    []string
	// metricsPort is the first node's /metrics port (127.0.0.1), +1 per
	// node in --nodes order; 0 serves no metrics.
	metricsPort int
	qpsPerNode  float32
	xidInterval time.Duration
}

func main() {
	klog.InitFlags(nil)
	pflag.CommandLine.AddGoFlagSet(flag.CommandLine) // klog's -v, --vmodule, …
	var o options
	pflag.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig file")
	pflag.StringVar(&o.configFile, "config", "", "device plugin config file (version: v1), shared by every node; empty uses the defaults")
	pflag.StringVar(&o.simFile, "sim-file", "", "simulated-cluster file (e2e/sim/clusters/*.yaml) holding the nodes (required)")
	pflag.StringVar(&o.baseDir, "base-dir", "", "directory with one subdirectory per node, as the kubelet emulator's --base-dir (required)")
	pflag.StringSliceVar(&o.nodes, "nodes", nil, "names of the nodes this process simulates (required)")
	pflag.IntVar(&o.metricsPort, "metrics-port", 0, "/metrics port of the first node on 127.0.0.1, +1 per node in --nodes order; 0 serves none")
	pflag.Float32Var(&o.qpsPerNode, "qps-per-node", 20, "API requests per second per node on the shared client (the shipped plugin's own client allows 20)")
	pflag.DurationVar(&o.xidInterval, "xid-interval", 2*time.Second, "how often each node's <state>/inject-xid file is read")
	pflag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	ctx = klog.NewContext(ctx, klog.Background().WithName("vgpu-device-plugin-sim-group"))
	if err := run(ctx, o); err != nil {
		klog.FromContext(ctx).Error(err, "Simulated device plugins failed")
		klog.Flush()
		stop()
		os.Exit(1)
	}
	klog.Flush()
}

// nodeConfig is node's device plugin configuration: the shared file with
// the node's own paths and metrics address (index is its place in --nodes).
func (o options) nodeConfig(node string, index int) (config.Config, error) {
	dir := filepath.Join(o.baseDir, node)
	f := app.Flags{
		ConfigFile: o.configFile, NodeName: node,
		PluginsDir:         filepath.Join(dir, "device-plugins"),
		PodResourcesSocket: filepath.Join(dir, "pod-resources", "kubelet.sock"),
		StateDir:           filepath.Join(dir, "state"),
		CDISpecDir:         filepath.Join(dir, "cdi"),
		MetricsAddress:     "off",
	}
	if o.metricsPort > 0 {
		f.MetricsAddress = fmt.Sprintf("127.0.0.1:%d", o.metricsPort+index)
	}
	return f.Config()
}

// simNodes finds every named node in the file, expanding it once.
func (o options) simNodes(file simconfig.File) ([]simconfig.Node, error) {
	if len(o.nodes) == 0 {
		return nil, fmt.Errorf("%w: pass --nodes=a,b,…", errNoNodes)
	}
	byName := map[string]simconfig.Node{}
	for _, n := range file.Nodes() {
		byName[n.Name] = n
	}
	out := make([]simconfig.Node, 0, len(o.nodes))
	for _, name := range o.nodes {
		n, ok := byName[name]
		if !ok {
			return nil, fmt.Errorf("--nodes: %s has no node %q (its nodes are <namePrefix>-<k>)", o.simFile, name)
		}
		out = append(out, n)
	}
	return out, nil
}

func run(ctx context.Context, o options) error {
	logger := klog.FromContext(ctx)
	if o.simFile == "" || o.baseDir == "" {
		return errors.New("--sim-file and --base-dir are required")
	}
	file, err := simconfig.Load(o.simFile)
	if err != nil {
		return fmt.Errorf("--sim-file: %w", err)
	}
	nodes, err := o.simNodes(file)
	if err != nil {
		return err
	}
	cfgs := make([]config.Config, len(nodes))
	for i, n := range nodes {
		if cfgs[i], err = o.nodeConfig(n.Name, i); err != nil {
			return fmt.Errorf("node %s: %w", n.Name, err)
		}
	}
	qps := o.qpsPerNode * float32(len(nodes))
	client, err := kubeclient.New(o.kubeconfig, "vgpu-device-plugin-sim-group", qps, int(2*qps))
	if err != nil {
		return err
	}

	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	restarts := make([]chan struct{}, len(nodes))
	var wg sync.WaitGroup
	for i, n := range nodes {
		restarts[i] = make(chan struct{}, 1)
		nctx := klog.NewContext(ctx, logger.WithValues("node", n.Name))
		lib, maxShares, err := simnode.Open(nctx, n, simnode.Xid{File: filepath.Join(cfgs[i].StateDir, "inject-xid"), Interval: o.xidInterval}, "")
		if err != nil {
			cancel(err)
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer lib.Shutdown()
			err := app.RunNode(nctx, app.Node{Name: n.Name, Config: cfgs[i], Lib: lib, MaxShares: maxShares, Client: client}, restarts[i])
			if err != nil {
				cancel(fmt.Errorf("node %s: %w", n.Name, err))
			}
		}()
	}
	logger.Info("Simulating device plugins", "nodes", len(nodes), "file", o.simFile, "baseDir", o.baseDir)
	go forwardHUP(ctx, restarts)
	<-ctx.Done()
	wg.Wait()
	if err := context.Cause(ctx); !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

// forwardHUP re-registers every node with kubelet on SIGHUP, as the
// shipped plugin does for its one node.
func forwardHUP(ctx context.Context, restarts []chan struct{}) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
		}
		for _, r := range restarts {
			select {
			case r <- struct{}{}:
			default:
			}
		}
	}
}
