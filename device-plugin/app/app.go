// Package app is the device plugin binary minus the way it opens NVML: flags,
// configuration, the API and PodResources clients, metrics and the plugin's
// run loop. cmd/vgpu-device-plugin runs it on the node's NVML; the test
// harness runs the same code on a simulated NVML (e2e/cmd/vgpu-device-plugin-sim).
package app

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/pflag"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/config"
	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/gpu"
	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/healthz"
	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/plugin"
	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/podresources"
	"github.com/volcano-vgpu/volcano-vgpu/kubeclient"
)

// OpenDeviceLib opens the GPUs of node. A non-zero maxShares overrides the
// configuration's maxShares (a simulated node carries its own). The library
// is shut down when Run returns.
type OpenDeviceLib func(ctx context.Context, cfg config.Config, node string) (lib gpu.DeviceLib, maxShares int, err error)

// ErrNoNodeName is returned by Run when neither --node-name nor NODE_NAME
// names the node.
var ErrNoNodeName = errors.New("node name unknown")

// Main is a device plugin binary's main function: it parses the command line
// (Flags, klog's flags and whatever bind adds; bind may be nil), runs the
// plugin until SIGINT or SIGTERM, and exits with status 1 when Run fails.
// name names the logger.
func Main(name string, bind func(*pflag.FlagSet), open OpenDeviceLib) {
	klog.InitFlags(nil)
	pflag.CommandLine.AddGoFlagSet(flag.CommandLine) // klog's -v, --vmodule, …
	var f Flags
	f.Bind(pflag.CommandLine)
	if bind != nil {
		bind(pflag.CommandLine)
	}
	pflag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	ctx = klog.NewContext(ctx, klog.Background().WithName(name))
	if err := Run(ctx, f, open); err != nil {
		klog.FromContext(ctx).Error(err, "Device plugin failed")
		klog.Flush()
		stop()
		os.Exit(1)
	}
	klog.Flush()
}

// Run runs the device plugin of one node until ctx ends; SIGHUP re-registers
// it with kubelet.
func Run(ctx context.Context, f Flags, open OpenDeviceLib) error {
	cfg, err := f.Config()
	if err != nil {
		return err
	}
	node := f.NodeName
	if node == "" {
		node = os.Getenv("NODE_NAME")
	}
	if node == "" {
		return fmt.Errorf("%w: pass --node-name or set NODE_NAME (the DaemonSet sets it from spec.nodeName)", ErrNoNodeName)
	}
	lib, maxShares, err := open(ctx, cfg, node)
	if err != nil {
		return err
	}
	defer lib.Shutdown()
	client, err := kubeclient.New(f.Kubeconfig, "vgpu-device-plugin/"+node, 20, 40)
	if err != nil {
		return err
	}
	restart := make(chan struct{}, 1)
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	go func() {
		for range hup {
			select {
			case restart <- struct{}{}:
			default:
			}
		}
	}()
	return RunNode(ctx, Node{Name: node, Config: cfg, Lib: lib, MaxShares: maxShares, Client: client}, restart)
}

// Node is one node's device plugin and what it runs on.
type Node struct {
	Name   string
	Config config.Config
	Lib    gpu.DeviceLib
	// MaxShares overrides Config.MaxShares when non-zero.
	MaxShares int
	Client    kubernetes.Interface
}

// RunNode runs the device plugin of node n on an opened device library and
// API client until ctx ends; a value on restart re-registers it with
// kubelet. Run calls it once per process; a simulator may host several
// nodes in one process by calling it once per node, each with its own
// Config paths (kubelet directory, PodResources socket, state, metrics).
func RunNode(ctx context.Context, n Node, restart <-chan struct{}) error {
	logger := klog.FromContext(ctx)
	cfg := n.Config
	pr, err := podresources.NewClient(cfg.Kubelet.PodResourcesSocket, cfg.ResourceNames.Number, 5*time.Second)
	if err != nil {
		return err
	}
	defer pr.Close()
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	p, err := plugin.New(ctx, plugin.Options{
		Node: n.Name, Client: n.Client, Lib: n.Lib, Config: cfg, MaxShares: n.MaxShares,
		PodResources: pr, Limiter: plugin.EncodeLimiter, Clock: clock.RealClock{}, Registry: reg,
	})
	if err != nil {
		return err
	}
	if cfg.MetricsAddress != "" {
		if err := serveMetrics(ctx, cfg.MetricsAddress, reg, p); err != nil {
			return err
		}
	}
	logger.Info("Starting", "node", n.Name, "devicePluginsDir", cfg.Kubelet.DevicePluginsDir, "stateDir", cfg.StateDir)
	return p.Run(ctx, restart)
}

// Checker is what the health endpoints ask.
type Checker interface {
	Live() error       // the health loops run
	NVMLReady() error  // NVML answered lately
	Registered() error // kubelet knows the plugin
}

// Mux serves /metrics and the health endpoints: /livez (the process and its
// health loops run: the liveness probe; a kubelet restart does not fail it),
// /readyz (NVML answers and kubelet has the plugin registered: the readiness
// probe) and /healthz (every check, for people).
func Mux(reg *prometheus.Registry, c Checker) *http.ServeMux {
	live := healthz.Check{Name: "health loops", Fn: c.Live}
	nvml := healthz.Check{Name: "NVML", Fn: c.NVMLReady}
	kubelet := healthz.Check{Name: "kubelet registration", Fn: c.Registered}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	mux.Handle("/livez", healthz.Handler(live))
	mux.Handle("/readyz", healthz.Handler(nvml, kubelet))
	mux.Handle("/healthz", healthz.Handler(live, nvml, kubelet))
	return mux
}

func serveMetrics(ctx context.Context, addr string, reg *prometheus.Registry, c Checker) error {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("metricsAddress %s: %w (set another address, or \"\" to disable)", addr, err)
	}
	srv := &http.Server{Handler: Mux(reg, c), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(lis) }()
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	klog.FromContext(ctx).Info("Serving metrics", "address", lis.Addr().String())
	return nil
}
