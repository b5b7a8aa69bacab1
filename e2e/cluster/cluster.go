package cluster

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/volcano-vgpu/volcano-vgpu/e2e/sim/simconfig"
)

// Cluster is a running local cluster.
type Cluster struct {
	Config     Config
	RestConfig *rest.Config
	Client     kubernetes.Interface
	// Started is true when this Up started etcd (a fresh cluster), false when
	// it found one running and reused it.
	Started bool
	Nodes   []simconfig.Node

	creds   credentials
	webhook webhookTLS
}

// component is one control-plane process: how to start it and how to know
// it is ready.
type component struct {
	proc
	port  int // a port it listens on, checked free before start
	ready func() error
	wait  time.Duration
}

// Up starts whatever part of the cluster is not running and waits until all
// of it is ready. It is idempotent. When it fails, it stops every process it
// started itself (what it found running and reused stays), so a failed start
// leaves nothing behind for the next run to trip over.
func Up(ctx context.Context, cfg Config) (*Cluster, error) {
	before := Status(cfg)
	cl, err := up(ctx, cfg)
	if err == nil {
		return cl, nil
	}
	if serr := cfg.stopStartedSince(context.WithoutCancel(ctx), before); serr != nil {
		return nil, fmt.Errorf("%w (and stopping what this start launched: %v)", err, serr)
	}
	return nil, err
}

// stopStartedSince stops every live process that was not alive in before
// (a Status taken earlier).
func (c Config) stopStartedSince(ctx context.Context, before map[string]bool) error {
	var started []string
	for name, alive := range Status(c) {
		if alive && !before[name] {
			started = append(started, name)
		}
	}
	return c.stopAll(ctx, started)
}

func up(ctx context.Context, cfg Config) (*Cluster, error) {
	logger := klog.FromContext(ctx)
	sim, err := simconfig.Load(cfg.SimFile)
	if err != nil {
		return nil, err
	}
	for _, d := range []string{cfg.StateDir, cfg.SocketDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	cr, err := cfg.ensureCredentials()
	if err != nil {
		return nil, fmt.Errorf("credentials: %w", err)
	}
	if err := cfg.writeStages(); err != nil {
		return nil, err
	}
	if err := ensureInotify(logger, len(sim.Nodes())); err != nil {
		return nil, err
	}
	cl := &Cluster{Config: cfg, Nodes: sim.Nodes(), creds: cr}

	wt, err := cfg.ensureWebhookTLS()
	if err != nil {
		return nil, fmt.Errorf("webhook certificates: %w", err)
	}
	cl.webhook = wt
	for _, comp := range cfg.controlPlane(cr, wt) {
		if comp.name == "vc-webhook-manager" {
			// Everything after the apiserver needs the kubeconfig, the CRDs
			// and Volcano's webhook configurations.
			if err := cl.connect(cr); err != nil {
				return nil, err
			}
			if err := applyCRDs(ctx, cl.RestConfig, cfg.CRDDir); err != nil {
				return nil, err
			}
			if err := cfg.ensureWebhookConfigs(ctx, cl.Client, wt); err != nil {
				return nil, err
			}
		}
		if err := cfg.ensure(ctx, comp, &cl.Started); err != nil {
			return nil, err
		}
		logger.V(2).Info("Component ready", "component", comp.name)
	}
	if err := cl.ensureNodes(ctx); err != nil {
		return nil, err
	}
	if err := cl.ensureNodeAgents(ctx); err != nil {
		return nil, err
	}
	return cl, nil
}

// ensure starts comp unless it already runs, then waits for it to be ready.
func (c Config) ensure(ctx context.Context, comp component, started *bool) error {
	logger := klog.FromContext(ctx)
	if pid, alive := c.running(comp.name); alive && c.outdated(comp.name, comp.args[0]) {
		logger.Info("Restarting with the newer binary", "component", comp.name, "pid", pid)
		if err := c.stop(comp.name, 10*time.Second); err != nil {
			return err
		}
	}
	if pid, alive := c.running(comp.name); alive {
		if err := comp.ready(); err == nil {
			logger.V(2).Info("Reusing running component", "component", comp.name, "pid", pid)
			return nil
		}
		return c.waitFor(ctx, comp.name, comp.wait, comp.ready)
	} else if pid != 0 {
		logger.Info("Removing stale pid file left by a crashed run", "component", comp.name, "pid", pid)
		_ = os.Remove(c.pidFile(comp.name))
	}
	if comp.port != 0 {
		if err := portFree(comp.name, comp.port); err != nil {
			return err
		}
	}
	if comp.name == "etcd" {
		*started = true
	}
	pid, err := c.start(comp.proc)
	if err != nil {
		return err
	}
	logger.Info("Started", "component", comp.name, "pid", pid, "log", filepath.Join(c.logDir(), comp.name+".log"))
	return c.waitFor(ctx, comp.name, comp.wait, comp.ready)
}

func (c Config) controlPlane(cr credentials, wt webhookTLS) []component {
	p := c.Ports
	loop := func(port int) string { return fmt.Sprintf("127.0.0.1:%d", port) }
	etcdURL := "http://" + loop(p.EtcdClient)
	peerURL := "http://" + loop(p.EtcdPeer)
	insecure := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, // readiness probe only, before the CA file exists
	}}
	httpOK := func(url, token, want string) func() error {
		return func() error {
			req, _ := http.NewRequest(http.MethodGet, url, nil)
			if token != "" {
				req.Header.Set("Authorization", "Bearer "+token)
			}
			resp, err := insecure.Do(req)
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
			if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), want) {
				return fmt.Errorf("%s: HTTP %d %s", url, resp.StatusCode, strings.TrimSpace(string(body)))
			}
			return nil
		}
	}
	kubeconfig := "--kubeconfig=" + c.Kubeconfig()
	return []component{
		{
			proc: proc{name: "etcd", args: []string{c.bin("etcd"),
				"--name=vgpu-local", "--data-dir=" + filepath.Join(c.StateDir, "etcd"),
				"--listen-client-urls=" + etcdURL, "--advertise-client-urls=" + etcdURL,
				"--listen-peer-urls=" + peerURL, "--initial-advertise-peer-urls=" + peerURL,
				"--initial-cluster=vgpu-local=" + peerURL, "--unsafe-no-fsync=true",
				"--log-level=warn"}},
			port: p.EtcdClient, ready: httpOK(etcdURL+"/health", "", `"health":"true"`), wait: 30 * time.Second,
		},
		{
			proc: proc{name: "kube-apiserver", args: []string{c.bin("kube-apiserver"),
				"--etcd-servers=" + etcdURL, "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
				fmt.Sprintf("--secure-port=%d", p.APIServer), "--cert-dir=" + c.certDir(),
				"--token-auth-file=" + cr.tokenFile, "--authorization-mode=RBAC",
				"--service-account-key-file=" + cr.saKey, "--service-account-signing-key-file=" + cr.saKey,
				"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
				"--disable-admission-plugins=ServiceAccount,TaintNodesByCondition",
				"--service-cluster-ip-range=10.0.0.0/24", "--allow-privileged=true",
				// Webhooks named by Service reach a ready endpoint of its
				// EndpointSlices (no kube-proxy here to route a cluster IP).
				"--enable-aggregator-routing=true",
				"--profiling=false", "--v=0"}},
			port:  p.APIServer,
			ready: httpOK(fmt.Sprintf("https://127.0.0.1:%d/readyz", p.APIServer), cr.token, "ok"),
			wait:  90 * time.Second,
		},
		{
			proc: proc{name: "vc-webhook-manager", args: []string{c.bin("vc-webhook-manager"), kubeconfig,
				"--listen-address=127.0.0.1", fmt.Sprintf("--port=%d", p.Webhook),
				"--webhook-url=" + fmt.Sprintf("https://127.0.0.1:%d", p.Webhook),
				"--ca-cert-file=" + wt.ca, "--tls-cert-file=" + wt.cert, "--tls-private-key-file=" + wt.key}},
			port: p.Webhook, ready: tlsUp(loop(p.Webhook)), wait: 60 * time.Second,
		},
		{
			// Our admission webhook: vGPU requests as totals for the queues.
			proc: proc{name: AdmissionName, args: []string{c.bin("vgpu-admission"), kubeconfig,
				"--listen=" + loop(p.Admission), "--tls-cert-file=" + wt.cert, "--tls-key-file=" + wt.key}},
			port: p.Admission, ready: tlsUp(loop(p.Admission)), wait: 60 * time.Second,
		},
		{
			// Only the controllers a cluster without kubelets needs: garbage
			// collection (a deleted Job's pods) and namespace deletion.
			proc: proc{name: "kube-controller-manager", args: []string{c.bin("kube-controller-manager"), kubeconfig,
				"--controllers=garbage-collector-controller,namespace-controller", "--leader-elect=false",
				"--bind-address=127.0.0.1", fmt.Sprintf("--secure-port=%d", p.ControllerManager),
				"--use-service-account-credentials=false", "--v=0"}},
			port: p.ControllerManager, ready: httpOK(fmt.Sprintf("https://127.0.0.1:%d/healthz", p.ControllerManager), "", "ok"),
			wait: 60 * time.Second,
		},
		{
			proc: proc{name: "vc-controller-manager", args: []string{c.bin("vc-controller-manager"), kubeconfig,
				"--leader-elect=false", "--listen-address=" + loop(p.ControllerMetrics),
				"--enable-healthz", "--healthz-address=" + loop(p.ControllerHealthz),
				"--kube-api-qps=500", "--kube-api-burst=1000"}},
			port: p.ControllerHealthz, ready: httpOK("http://"+loop(p.ControllerHealthz)+"/healthz", "", "ok"), wait: 60 * time.Second,
		},
		{
			proc: proc{name: SchedulerName, env: c.SchedulerEnv, args: append(append(slices.Clone(c.SchedulerWrapper), c.bin("vc-scheduler"), kubeconfig,
				"--scheduler-conf="+c.SchedulerConf, "--leader-elect=false",
				"--listen-address="+loop(p.SchedulerMetrics), "--enable-metrics",
				"--enable-healthz", "--healthz-address="+loop(p.SchedulerHealthz), "--enable-pprof="+strconv.FormatBool(c.SchedulerPprof)), c.SchedulerArgs...)},
			port: p.SchedulerHealthz, ready: httpOK("http://"+loop(p.SchedulerHealthz)+"/healthz", "", "ok"), wait: 60 * time.Second,
		},
		{
			proc: proc{name: "kwok", args: []string{c.bin("kwok"), kubeconfig,
				"--manage-all-nodes=false", "--manage-nodes-with-annotation-selector=" + kwokNodeAnnotation + "=fake",
				"--config=" + filepath.Join(c.StateDir, "kwok-stages.yaml"),
				"--server-address=" + loop(p.KwokServer)}},
			port: p.KwokServer, ready: httpOK("http://"+loop(p.KwokServer)+"/healthz", "", "ok"), wait: 30 * time.Second,
		},
	}
}

// AdmissionName is the pid/log name of vgpu-admission.
const AdmissionName = "vgpu-admission"

// SchedulerName is the pid/log name of vc-scheduler.
const SchedulerName = "vc-scheduler"

// StopScheduler stops vc-scheduler (no-op when it is not running) and
// waits until its ports are free; RestartScheduler starts it again.
func (cl *Cluster) StopScheduler() error {
	if err := cl.Config.stop(SchedulerName, 10*time.Second); err != nil {
		return err
	}
	// stop returns once the process no longer shows as ours, which can be
	// before an exiting process has closed its listeners: wait for its ports.
	p := cl.Config.Ports
	for _, port := range []int{p.SchedulerMetrics, p.SchedulerHealthz} {
		deadline := time.Now().Add(15 * time.Second)
		for portFree(SchedulerName, port) != nil && time.Now().Before(deadline) {
			time.Sleep(100 * time.Millisecond)
		}
	}
	return nil
}

// RestartScheduler stops vc-scheduler and starts it again from cl.Config
// (SchedulerConf, SchedulerWrapper, SchedulerEnv may have changed since Up),
// then waits until it is healthy.
func (cl *Cluster) RestartScheduler(ctx context.Context) error {
	if err := cl.StopScheduler(); err != nil {
		return err
	}
	for _, comp := range cl.Config.controlPlane(cl.creds, cl.webhook) {
		if comp.name == SchedulerName {
			var started bool
			return cl.Config.ensure(ctx, comp, &started)
		}
	}
	return fmt.Errorf("no %s component", SchedulerName)
}

// connect writes the kubeconfig and builds the clients.
func (cl *Cluster) connect(cr credentials) error {
	if err := cl.Config.writeKubeconfig(cr); err != nil {
		return err
	}
	rc, err := clientcmd.BuildConfigFromFlags("", cl.Config.Kubeconfig())
	if err != nil {
		return fmt.Errorf("kubeconfig %s: %w", cl.Config.Kubeconfig(), err)
	}
	rc.QPS, rc.Burst = 200, 400
	cl.RestConfig = rc
	cl.Client, err = kubernetes.NewForConfig(rc)
	return err
}

// Down stops every process the harness started, newest first, and removes
// the cluster's state.
func Down(ctx context.Context, cfg Config) error {
	if err := cfg.stopAll(ctx, cfg.pidNames()); err != nil {
		return fmt.Errorf("cluster-down: %w", err)
	}
	if err := os.RemoveAll(cfg.SocketDir); err != nil {
		return err
	}
	return os.RemoveAll(cfg.StateDir)
}

// stopOrder is the control plane in reverse start order.
var stopOrder = []string{"kwok", SchedulerName, "vc-controller-manager", "kube-controller-manager", AdmissionName, "vc-webhook-manager", "kube-apiserver", "etcd"}

// stopAll stops the named processes: node agents first, then the control
// plane in reverse start order.
func (c Config) stopAll(ctx context.Context, names []string) error {
	logger := klog.FromContext(ctx)
	var ordered []string
	for _, n := range names {
		if !slices.Contains(stopOrder, n) {
			ordered = append(ordered, n)
		}
	}
	for _, n := range stopOrder {
		if slices.Contains(names, n) {
			ordered = append(ordered, n)
		}
	}
	var errs []string
	for _, n := range ordered {
		if pid, alive := c.running(n); alive {
			logger.Info("Stopping", "component", n, "pid", pid)
		}
		if err := c.stop(n, 10*time.Second); err != nil {
			errs = append(errs, err.Error())
		}
	}
	if len(errs) > 0 {
		return errors.New(strings.Join(errs, "; "))
	}
	return nil
}

// Status lists the harness's processes and whether each is alive.
func Status(cfg Config) map[string]bool {
	out := map[string]bool{}
	for _, n := range cfg.pidNames() {
		_, alive := cfg.running(n)
		out[n] = alive
	}
	return out
}

// tlsUp is ready once a TLS server answers a handshake at addr.
func tlsUp(addr string) func() error {
	return func() error {
		conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 2 * time.Second}, "tcp", addr, &tls.Config{InsecureSkipVerify: true})
		if err != nil {
			return err
		}
		return conn.Close()
	}
}
