// Command vgpu-admission is volcano-vgpu's mutating admission webhook for
// pods (see package admission): vGPU requests become totals for Volcano's
// queues, malformed ones are refused at creation, and vGPU pods get the
// scheduler name when --scheduler-name is set. It serves HTTPS on --listen
// at /pods/mutate with the certificate kube-apiserver trusts through the
// MutatingWebhookConfiguration's caBundle, reloading the certificate and key
// when their files change (a renewed Secret, cert-manager) without a restart,
// and watches nodes for the GPU sizes that percentage and whole-GPU asks are
// counted at. /metrics counts the reviews it answered; /healthz says it serves.
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/volcano-vgpu/volcano-vgpu/admission"
	"github.com/volcano-vgpu/volcano-vgpu/api"
)

func main() {
	klog.InitFlags(nil)
	names := api.DefaultResourceNames()
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig file (default: in-cluster)")
	listen := flag.String("listen", ":9443", "HTTPS address to serve on")
	certFile := flag.String("tls-cert-file", "", "serving certificate (PEM)")
	keyFile := flag.String("tls-key-file", "", "serving key (PEM)")
	scheduler := flag.String("scheduler-name", "", "scheduler name to set on vGPU pods that name none or the default one (empty: leave them)")
	flag.StringVar(&names.Number, "resource-number", names.Number, "GPU count resource")
	flag.StringVar(&names.Memory, "resource-memory", names.Memory, "GPU memory resource (MiB)")
	flag.StringVar(&names.MemoryPercentage, "resource-memory-percentage", names.MemoryPercentage, "GPU memory percentage resource")
	flag.StringVar(&names.Cores, "resource-cores", names.Cores, "GPU cores resource (percent)")
	drain := flag.Duration("shutdown-delay", 10*time.Second, "how long to go on serving after SIGTERM, connections closed after each answer, before shutting down "+
		"(kube-apiserver learns late that a replica is going and keeps its connection to it; with failurePolicy Fail a replica that stops at once refuses pods)")
	flag.Parse()
	logger := klog.Background().WithName("vgpu-admission")
	if *drain < 0 {
		logger.Error(nil, "Exiting: --shutdown-delay must not be negative", "shutdownDelay", *drain)
		klog.Flush()
		os.Exit(2)
	}
	if err := run(logger, *kubeconfig, *listen, *certFile, *keyFile, *scheduler, names, *drain); err != nil {
		logger.Error(err, "Exiting")
		klog.Flush()
		os.Exit(1)
	}
}

func run(logger klog.Logger, kubeconfig, listen, certFile, keyFile, scheduler string, names api.ResourceNames, drain time.Duration) error {
	if err := names.Validate(); err != nil {
		return err
	}
	if certFile == "" || keyFile == "" {
		return errors.New("--tls-cert-file and --tls-key-file are required: kube-apiserver calls webhooks over HTTPS only")
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	tlsConfig, err := servingTLS(ctx, certFile, keyFile)
	if err != nil {
		return err
	}
	cfg, err := restConfig(kubeconfig)
	if err != nil {
		return err
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	factory := informers.NewSharedInformerFactory(client, 10*time.Minute)
	nodes := factory.Core().V1().Nodes().Lister()
	factory.Start(ctx.Done())
	for typ, ok := range factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return fmt.Errorf("node cache did not sync (%v)", typ)
		}
	}
	opts := admission.Options{Names: names, SchedulerName: scheduler,
		GPUMemoryMiB: admission.SmallestGPU(func() ([]*corev1.Node, error) { return nodes.List(labels.Everything()) })}
	reg := prometheus.NewRegistry()
	mux := http.NewServeMux()
	mux.Handle("/pods/mutate", admission.Handler(opts, admission.NewMetrics(reg)))
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	handler := &drainable{Handler: mux}
	srv := &http.Server{Addr: listen, Handler: handler, ReadHeaderTimeout: 10 * time.Second, TLSConfig: tlsConfig}
	errc := make(chan error, 1)
	go func() { errc <- srv.ListenAndServeTLS("", "") }()
	logger.Info("Serving", "listen", listen, "schedulerName", scheduler)
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	return shutdown(logger, srv, handler, errc, drain)
}

// drainable serves as its Handler does; once draining, each answer carries
// "Connection: close", so the server closes that connection after it
// (HTTP/2: a GOAWAY once its streams are done) and the client, told so in
// the answer, does not send on it again.
type drainable struct {
	http.Handler
	draining atomic.Bool
}

func (d *drainable) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if d.draining.Load() {
		w.Header().Set("Connection", "close")
	}
	d.Handler.ServeHTTP(w, r)
}

// shutdown stops a server that got SIGTERM: first it goes on serving for
// drain, closing each connection after its next answer, so that
// kube-apiserver dials again and, once its endpoints say this replica is
// going, reaches another one; then it stops taking connections and waits up
// to 10 s for the requests in flight. Stopped at once, a replica of a
// rolling update refused vGPU pods under failurePolicy Fail: kube-apiserver
// kept its open connection to it, and under load dialled its address after
// it had stopped (simulated cluster, TestAdmissionTwoReplicasOneStopped).
// Idle connections stay open while draining: kube-apiserver calls webhooks
// over HTTP/1.1, where closing an idle connection races with a request the
// client is sending on it, and the request fails ("broken pipe"; a POST is
// not sent again). Closing them at SIGTERM refused a vGPU pod so (CI, the
// same test).
func shutdown(logger klog.Logger, srv *http.Server, handler *drainable, errc <-chan error, drain time.Duration) error {
	handler.draining.Store(true)
	if drain > 0 {
		logger.Info("Draining: serving on, each connection closed after its next answer", "shutdownDelay", drain)
		select {
		case err := <-errc:
			return err
		case <-time.After(drain):
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	logger.Info("Shutting down")
	return srv.Shutdown(ctx)
}

// servingTLS returns the server's TLS configuration: the certificate and
// key are read from their files now (an unreadable or mismatched pair fails
// the start) and again whenever the files change, and at least once a
// minute, by k8s.io/apiserver's dynamic certificate controllers (the same
// code kube-apiserver serves with), until ctx ends. Connections made after a
// reload get the new certificate.
func servingTLS(ctx context.Context, certFile, keyFile string) (*tls.Config, error) {
	content, err := dynamiccertificates.NewDynamicServingContentFromFiles("serving-cert", certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("serving certificate --tls-cert-file=%s --tls-key-file=%s: %w", certFile, keyFile, err)
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, NextProtos: []string{"h2", "http/1.1"}}
	ctrl := dynamiccertificates.NewDynamicServingCertificateController(cfg, nil, content, nil, nil)
	content.AddListener(ctrl)
	if err := ctrl.RunOnce(); err != nil {
		return nil, fmt.Errorf("serving certificate %s: %w", certFile, err)
	}
	go content.Run(ctx, 1)
	go ctrl.Run(1, ctx.Done())
	cfg.GetConfigForClient = ctrl.GetConfigForClient
	return cfg, nil
}

func restConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig != "" {
		return clientcmd.BuildConfigFromFlags("", kubeconfig)
	}
	return rest.InClusterConfig()
}
