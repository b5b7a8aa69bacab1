// Command vgpu-device-plugin is the volcano-vgpu device plugin of one node:
// it registers volcano.sh/vgpu-number with kubelet, publishes the node's
// GPU inventory and vgpu-memory/vgpu-cores capacity, and gives each
// container exactly the GPUs and limits the scheduler assigned it.
//
// With --simulate=<e2e/sim/clusters/*.yaml> it runs on a simulated NVML built from
// that file's node named --node-name; no GPU or driver is needed.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/pflag"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/config"
	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/gpu"
	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/plugin"
	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/podresources"
	"github.com/volcano-vgpu/volcano-vgpu/e2e/sim/nvmlsim"
	"github.com/volcano-vgpu/volcano-vgpu/e2e/sim/simconfig"
)

func main() {
	klog.InitFlags(nil)
	pflag.CommandLine.AddGoFlagSet(flag.CommandLine) // klog's -v, --vmodule, …
	var f flags
	f.bind(pflag.CommandLine)
	pflag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	ctx = klog.NewContext(ctx, klog.Background().WithName("vgpu-device-plugin"))
	if err := run(ctx, f); err != nil {
		klog.FromContext(ctx).Error(err, "vgpu-device-plugin failed")
		klog.Flush()
		os.Exit(1)
	}
	klog.Flush()
}

func run(ctx context.Context, f flags) error {
	logger := klog.FromContext(ctx)
	cfg, err := f.config()
	if err != nil {
		return err
	}
	node := f.nodeName
	if node == "" {
		node = os.Getenv("NODE_NAME")
	}
	if node == "" {
		return errors.New("node name unknown: pass --node-name or set NODE_NAME (the DaemonSet sets it from spec.nodeName)")
	}
	lib, maxShares, err := openNVML(ctx, f, cfg, node)
	if err != nil {
		return err
	}
	defer lib.Shutdown()
	rest, err := clientcmd.BuildConfigFromFlags("", f.kubeconfig)
	if err != nil {
		return fmt.Errorf("kubeconfig %q: %w (omit --kubeconfig inside the cluster)", f.kubeconfig, err)
	}
	rest.QPS, rest.Burst = 20, 40
	rest.UserAgent = "vgpu-device-plugin/" + node
	client, err := kubernetes.NewForConfig(rest)
	if err != nil {
		return err
	}
	pr, err := podresources.NewClient(cfg.Kubelet.PodResourcesSocket, cfg.ResourceNames.Number, 5*time.Second)
	if err != nil {
		return err
	}
	defer pr.Close()
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	p, err := plugin.New(ctx, plugin.Options{
		Node: node, Client: client, Lib: lib, Config: cfg, MaxShares: maxShares,
		PodResources: pr, Limiter: plugin.EncodeLimiter, Clock: clock.RealClock{}, Registry: reg,
	})
	if err != nil {
		return err
	}
	if cfg.MetricsAddress != "" {
		if err := serveMetrics(ctx, cfg.MetricsAddress, reg); err != nil {
			return err
		}
	}
	restart := make(chan struct{}, 1)
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	go func() {
		for range hup {
			select {
			case restart <- struct{}{}:
			default:
			}
		}
	}()
	logger.Info("Starting", "node", node, "simulate", f.simulate, "devicePluginsDir", cfg.Kubelet.DevicePluginsDir, "stateDir", cfg.StateDir)
	return p.Run(ctx, restart)
}

func openNVML(ctx context.Context, f flags, cfg config.Config, node string) (gpu.DeviceLib, int, error) {
	if f.simulate == "" {
		lib, err := gpu.Open()
		if err != nil {
			return nil, 0, err
		}
		if _, err := os.Stat(cfg.Limiter.HostLibrary); err != nil {
			klog.FromContext(ctx).Error(err, "libvcuda.so is missing on the host; containers will fail to start until it is installed", "limiter.hostLibrary", cfg.Limiter.HostLibrary)
		}
		return lib, 0, nil
	}
	file, err := simconfig.Load(f.simulate)
	if err != nil {
		return nil, 0, fmt.Errorf("--simulate: %w", err)
	}
	n, ok := file.Find(node)
	if !ok {
		return nil, 0, fmt.Errorf("--simulate=%s has no node %q (its nodes are <namePrefix>-<k>; check --node-name)", f.simulate, node)
	}
	sim := nvmlsim.New(n)
	lib, err := gpu.New(sim)
	if err != nil {
		return nil, 0, err
	}
	xidFile := f.simulateXIDFile
	if xidFile == "" {
		xidFile = filepath.Join(cfg.StateDir, "inject-xid")
	}
	go nvmlsim.InjectFile{Sim: sim, Path: xidFile}.Run(ctx)
	klog.FromContext(ctx).Info("Simulating NVML", "file", f.simulate, "gpus", len(n.GPUs), "topology", n.Topology, "xidInjectionFile", xidFile)
	return lib, n.GPUs[0].MaxShares, nil
}

func serveMetrics(ctx context.Context, addr string, reg *prometheus.Registry) error {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("metricsAddress %s: %w (set another address, or \"\" to disable)", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(lis) }()
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	klog.FromContext(ctx).Info("Serving metrics", "address", lis.Addr().String())
	return nil
}
