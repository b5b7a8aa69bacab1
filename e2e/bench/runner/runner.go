// Package runner runs one benchmark pass on the local cluster: restart
// vc-scheduler with a configuration, create the trace's PodGroups and pods
// with a concurrent client, time creation and binding, sample the
// scheduler process, read where the pods went and clean up.
package runner

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/klog/v2"
	vcclient "volcano.sh/apis/pkg/client/clientset/versioned"

	"github.com/volcano-vgpu/volcano-vgpu/api"
	"github.com/volcano-vgpu/volcano-vgpu/e2e/bench/metrics"
	"github.com/volcano-vgpu/volcano-vgpu/e2e/bench/procstat"
	"github.com/volcano-vgpu/volcano-vgpu/e2e/bench/trace"
	"github.com/volcano-vgpu/volcano-vgpu/e2e/bench/transient"
	"github.com/volcano-vgpu/volcano-vgpu/e2e/cluster"
)

// Setup is one scheduler configuration under test.
type Setup struct {
	Name          string
	SchedulerConf string
	// GPU: pods ask vGPU resources (off: the same pods, CPU and memory only).
	GPU bool
	// Placement reads a bound pod's GPU shares from its annotations; nil
	// for setups without GPUs.
	Placement func(*corev1.Pod) ([][]metrics.Share, error)
}

// VGPUPlacement reads our plugin's assignment annotation.
func VGPUPlacement(p *corev1.Pod) ([][]metrics.Share, error) {
	v, ok := p.Annotations[api.AssignmentKey]
	if !ok {
		return nil, fmt.Errorf("pod %s: no %s", p.Name, api.AssignmentKey)
	}
	a, err := api.DecodeAssignment(v)
	if err != nil {
		return nil, err
	}
	return metrics.FromAssignment(a), nil
}

// DevicesharePlacement reads Volcano deviceshare's own annotation.
func DevicesharePlacement(p *corev1.Pod) ([][]metrics.Share, error) {
	return metrics.ParseDeviceshare(p.Annotations[metrics.DeviceshareIDsKey])
}

// Options are shared by every run.
type Options struct {
	Cluster *cluster.Cluster
	Kube    kubernetes.Interface // for creation: a client with a high QPS
	VC      vcclient.Interface
	Jobs    []trace.Job
	Tag     string        // names this invocation's namespaces (bench-<tag>-<setup>-<run>)
	Workers int           // concurrent creators
	Timeout time.Duration // give up waiting for binds after this
	Stall   time.Duration // …or when nothing bound for this long after creation
	// Pace, when set, caps the creators' rate together (retries included).
	Pace flowcontrol.RateLimiter
	// Backoff between attempts of one create (zero: transient.Backoff()).
	Backoff wait.Backoff
	// Profile > 0 takes a CPU profile of vc-scheduler for that long from
	// the first pod create, written to ProfileDir/<setup>-<run>.pprof.
	Profile    time.Duration
	ProfileDir string
	// Backlog creates every PodGroup and pod while their queue holds them
	// (capability: one millicore of CPU) and times the run from their
	// release (one queue update): the scheduler's own cost for the whole
	// trace, with the whole cluster in its cache, apart from how fast the API
	// server takes the pods (which, arriving one by one, sets how many
	// sessions the run opens).
	Backlog bool
	// CleanupStall: how long the cleanup before a run waits while no pod
	// is deleted (zero: 2 minutes).
	CleanupStall time.Duration
}

// Result is one run.
type Result struct {
	Setup string
	Run   int
	Pods  int
	Bound int
	// GroupSeconds: creating every PodGroup, before any pod (not timed as binding).
	GroupSeconds float64
	// CreateSeconds: first pod create call to the last pod created.
	CreateSeconds float64
	// BindSeconds: first pod create call to the last pod bound.
	BindSeconds float64
	AllBound    bool
	// PodsPerSecond: Bound / BindSeconds.
	PodsPerSecond float64
	// SchedulerCPUSeconds: user+system CPU of vc-scheduler during the run.
	SchedulerCPUSeconds float64
	// SchedulerPeakRSSMiB: vc-scheduler's VmHWM (it is restarted per run).
	SchedulerPeakRSSMiB float64
	// Sessions: scheduling sessions vc-scheduler had completed at the last
	// bind (read from its own metrics; 0 also when not read, which is
	// logged). A backlog is mostly placed by the first session.
	Sessions int `json:",omitempty"`
	// NodeAgentCPUSeconds: CPU of the simulated nodes' device plugins and
	// kubelet emulator during the run; APIServerCPUSeconds: kube-apiserver
	// and etcd's. They share the scheduler's cores here (not on a real
	// cluster's GPU nodes), so they slow binding.
	NodeAgentCPUSeconds float64 `json:",omitempty"`
	APIServerCPUSeconds float64 `json:",omitempty"`
	Prefix              metrics.Prefix
	Packing             metrics.Packing
	// Retries: transient failures met creating this run's objects, each
	// retried (RetryReasons: by kind, most frequent first).
	Retries      int    `json:",omitempty"`
	RetryReasons string `json:",omitempty"`
	// Profile is the vc-scheduler CPU profile of the run ("" when none was taken).
	Profile string `json:",omitempty"`
	// OwnCPUShare: the share of the profile's CPU samples with this
	// repository's code (the vgpu plugin, the placement core) on the stack.
	OwnCPUShare float64 `json:",omitempty"`
	// ProfileShares: the profile's parts (Part*) as shares of its CPU.
	ProfileShares map[string]float64 `json:",omitempty"`
	// Failed is why the run ended without a measurement ("" when it was
	// measured): the other fields hold what was measured before.
	Failed string `json:",omitempty"`
}

// Run performs run number n of setup s. It starts by deleting what
// earlier runs left (the last run's pods stay until Cleanup).
func Run(ctx context.Context, o Options, s Setup, n int) (res Result, err error) {
	logger := klog.FromContext(ctx).WithValues("setup", s.Name, "run", n)
	res = Result{Setup: s.Name, Run: n, Pods: trace.Sum(o.Jobs).Pods}
	ns := fmt.Sprintf("bench-%s-%s-%d", o.Tag, s.Name, n)
	if err := o.cleanup(ctx); err != nil { // what earlier runs left
		return res, err
	}
	cl := o.Cluster
	cl.Config.SchedulerConf = s.SchedulerConf
	startScheduler := func() (int, error) {
		if err := cl.RestartScheduler(ctx); err != nil {
			return 0, fmt.Errorf("restarting vc-scheduler with %s: %w", s.SchedulerConf, err)
		}
		pid, alive := cl.Config.Pid(cluster.SchedulerName)
		if !alive {
			return 0, errors.New("vc-scheduler is not running after its restart")
		}
		return pid, nil
	}
	var release func(context.Context) error
	if o.Backlog {
		if release, err = o.hold(ctx); err != nil {
			return res, err
		}
		defer func() {
			if release == nil {
				return
			}
			if rerr := release(context.WithoutCancel(ctx)); rerr != nil && err == nil {
				err = rerr
			}
		}()
	}
	pid, err := startScheduler()
	if err != nil {
		return res, err
	}
	nsObj := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: map[string]string{LabelBench: "true"}}}
	if _, err := o.Kube.CoreV1().Namespaces().Create(ctx, nsObj, metav1.CreateOptions{}); err != nil {
		return res, err
	}

	bound := newBindLog()
	factory := informers.NewSharedInformerFactoryWithOptions(o.Kube, 0, informers.WithNamespace(ns))
	inf := factory.Core().V1().Pods().Informer()
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { bound.see(obj) },
		UpdateFunc: func(_, obj any) { bound.see(obj) },
	}); err != nil {
		return res, err
	}
	stop := make(chan struct{})
	defer close(stop)
	factory.Start(stop)
	factory.WaitForCacheSync(stop)

	var before procstat.Sample
	var besideBefore cpuBeside
	sessionsBefore := 0
	if !o.Backlog {
		if before, err = procstat.Read(pid); err != nil {
			return res, fmt.Errorf("vc-scheduler: %w", err)
		}
		besideBefore = readBeside(cl.Config)
	}
	port := cl.Config.Ports.SchedulerMetrics
	var stats transient.Stats
	defer func() { res.Retries, res.RetryReasons = stats.Total(), stats.String() }()
	t0 := time.Now()
	if err := o.createGroups(ctx, ns, s.GPU, &stats); err != nil {
		return res, err
	}
	start := time.Now()
	res.GroupSeconds = start.Sub(t0).Seconds()
	if o.Backlog {
		if err := o.createPods(ctx, ns, s.GPU, &stats); err != nil {
			return res, err
		}
		res.CreateSeconds = time.Since(start).Seconds()
		logger.Info("Created, held in the queue", "pods", res.Pods, "seconds", res.CreateSeconds)
		// two full sessions after the last create: vc-scheduler has every
		// pod and every node in cache
		from, err := sessions(ctx, port)
		if err != nil {
			return res, err
		}
		if err := awaitSessions(ctx, port, from, 2, 5*time.Minute); err != nil {
			return res, err
		}
		if n := bound.count(); n > 0 {
			return res, fmt.Errorf("%d pods bound while the backlog was held in queue %s (capability: one millicore): this Volcano does not hold a queue at its capability, so -backlog cannot time it", n, backlogQueue)
		}
		if before, err = procstat.Read(pid); err != nil {
			return res, fmt.Errorf("vc-scheduler: %w", err)
		}
		besideBefore = readBeside(cl.Config)
		if sessionsBefore, err = sessions(ctx, port); err != nil {
			return res, err
		}
		start = time.Now() // binding is timed from the release
		r := release
		release = nil
		if err := r(ctx); err != nil {
			return res, err
		}
	}
	if o.Profile > 0 {
		path := filepath.Join(o.ProfileDir, fmt.Sprintf("%s-%d.pprof", s.Name, n))
		waitProfile := profile(ctx, cl.Config.Ports.SchedulerMetrics, o.Profile, path)
		defer func() {
			// The next run restarts vc-scheduler: wait for the profile first.
			if perr := waitProfile(); perr != nil {
				logger.Error(perr, "No CPU profile")
				return
			}
			res.Profile = path
			share, parts, serr := ProfileShares(path)
			if serr != nil {
				logger.Error(serr, "Unreadable CPU profile")
			}
			res.OwnCPUShare, res.ProfileShares = share, parts
		}()
	}
	created := start
	if !o.Backlog {
		if err := o.createPods(ctx, ns, s.GPU, &stats); err != nil {
			return res, err
		}
		created = time.Now()
		res.CreateSeconds = created.Sub(start).Seconds()
		logger.Info("Created", "pods", res.Pods, "seconds", res.CreateSeconds)
	}

	last := o.waitBound(ctx, bound, res.Pods, created)
	after, err := procstat.Read(pid)
	if err != nil {
		return res, fmt.Errorf("vc-scheduler died during the run: %w", err)
	}
	res.Bound, res.AllBound = bound.count(), bound.count() == res.Pods
	if !last.IsZero() {
		res.BindSeconds = last.Sub(start).Seconds()
		res.PodsPerSecond = float64(res.Bound) / res.BindSeconds
	}
	res.SchedulerCPUSeconds = after.CPUSeconds - before.CPUSeconds
	beside := readBeside(cl.Config).since(besideBefore)
	res.NodeAgentCPUSeconds, res.APIServerCPUSeconds = beside.NodeAgents, beside.APIServer
	if n, serr := sessions(ctx, port); serr != nil {
		logger.Error(serr, "Sessions not counted")
	} else {
		res.Sessions = n - sessionsBefore
	}
	res.SchedulerPeakRSSMiB = float64(after.PeakRSSKiB) / 1024
	logger.Info("Bound", "pods", res.Bound, "of", res.Pods, "seconds", res.BindSeconds)

	pods, nodes, err := o.placements(ctx, ns, s)
	if err != nil {
		return res, err
	}
	res.Prefix = metrics.PlacedPrefix(o.Jobs, pods)
	if s.GPU {
		res.Packing = metrics.Pack(nodes, pods)
	}
	return res, nil
}

// retrier retries o's creates through transient failures, paced by
// o.Pace, counting them in stats.
func (o Options) retrier(stats *transient.Stats) transient.Retrier {
	b := o.Backoff
	if b.Steps == 0 {
		b = transient.Backoff()
	}
	return transient.Retrier{Backoff: b, Pace: o.Pace, Stats: stats}
}

// createGroups makes every PodGroup, o.Workers at a time.
func (o Options) createGroups(ctx context.Context, ns string, gpu bool, stats *transient.Stats) error {
	var fs []func(context.Context) error
	for _, j := range o.Jobs {
		fs = append(fs, func(ctx context.Context) error {
			return o.retrier(stats).Create(ctx, func(ctx context.Context) error {
				_, err := o.VC.SchedulingV1beta1().PodGroups(ns).Create(ctx, PodGroup(j, ns, gpu), metav1.CreateOptions{})
				return err
			})
		})
	}
	if err := parallel(ctx, o.Workers, fs); err != nil {
		return fmt.Errorf("creating PodGroups: %w", err)
	}
	return nil
}

// createPods makes every pod in trace order, o.Workers at a time.
func (o Options) createPods(ctx context.Context, ns string, gpu bool, stats *transient.Stats) error {
	var fs []func(context.Context) error
	for _, j := range o.Jobs {
		for r := range j.Pods {
			fs = append(fs, func(ctx context.Context) error {
				return o.retrier(stats).Create(ctx, func(ctx context.Context) error {
					_, err := o.Kube.CoreV1().Pods(ns).Create(ctx, Pod(j, r, ns, gpu), metav1.CreateOptions{})
					return err
				})
			})
		}
	}
	if err := parallel(ctx, o.Workers, fs); err != nil {
		return fmt.Errorf("creating pods: %w", err)
	}
	return nil
}

// parallel runs fs in order with n workers and returns the first error.
func parallel(ctx context.Context, n int, fs []func(context.Context) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range max(n, 1) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= len(fs) || ctx.Err() != nil {
					return
				}
				if err := fs[i](ctx); err != nil {
					cancel(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	return context.Cause(ctx)
}

// placements reads the pods' nodes and GPU shares and the nodes' inventories.
func (o Options) placements(ctx context.Context, ns string, s Setup) ([]metrics.Pod, map[string]api.Inventory, error) {
	logger := klog.FromContext(ctx)
	list, err := o.Kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, nil, err
	}
	var pods []metrics.Pod
	for i := range list.Items {
		p := &list.Items[i]
		job, err := strconv.Atoi(p.Labels[LabelJob])
		if err != nil {
			return nil, nil, fmt.Errorf("pod %s: label %s: %w", p.Name, LabelJob, err)
		}
		mp := metrics.Pod{Job: job, Node: p.Spec.NodeName}
		if mp.Node != "" && s.Placement != nil {
			if mp.Containers, err = s.Placement(p); err != nil {
				logger.V(2).Info("No readable placement", "pod", klog.KObj(p), "err", err)
			}
		}
		pods = append(pods, mp)
	}
	nodes, err := Inventories(ctx, o.Kube)
	if err != nil {
		return nil, nil, err
	}
	return pods, nodes, nil
}

// Inventories reads every node's published GPU inventory.
func Inventories(ctx context.Context, kube kubernetes.Interface) (map[string]api.Inventory, error) {
	nodes := map[string]api.Inventory{}
	nl, err := kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	for _, n := range nl.Items {
		if v, ok := n.Annotations[api.InventoryKey]; ok {
			inv, err := api.DecodeInventory(v)
			if err != nil {
				return nil, fmt.Errorf("node %s: %w", n.Name, err)
			}
			nodes[n.Name] = inv
		}
	}
	return nodes, nil
}

// LabelBench marks the benchmark's namespaces.
const LabelBench = "volcano-vgpu.io/bench"

// cleanup deletes every benchmark pod in any namespace (at once: grace 0,
// one delete-collection per namespace, again until none is left) so the
// next run starts on empty GPUs, then deletes the benchmark namespaces
// (their PodGroups go with them) without waiting.
func (o Options) cleanup(ctx context.Context) error {
	zero := int64(0)
	del := metav1.DeleteOptions{GracePeriodSeconds: &zero}
	// One delete-collection per namespace (the API server deletes the pods
	// itself: thousands of single deletes took minutes on a loaded machine),
	// repeated while pods remain; the wait gives up only when no pod went
	// away for CleanupStall, however many there are.
	stall := cmp.Or(o.CleanupStall, 2*time.Minute)
	remaining, progressed := -1, time.Now()
	err := wait.PollUntilContextCancel(ctx, time.Second, true, func(ctx context.Context) (bool, error) {
		l, err := o.Kube.CoreV1().Pods("").List(ctx, metav1.ListOptions{LabelSelector: LabelJob, ResourceVersion: "0"})
		if err != nil {
			return false, nil
		}
		if len(l.Items) == 0 {
			return true, nil
		}
		if remaining < 0 || len(l.Items) < remaining {
			remaining, progressed = len(l.Items), time.Now()
		} else if time.Since(progressed) > stall {
			return false, fmt.Errorf("%d pods left, none deleted for %v", len(l.Items), stall)
		}
		nss := map[string]bool{}
		for _, p := range l.Items {
			nss[p.Namespace] = true
		}
		for ns := range nss {
			_ = o.Kube.CoreV1().Pods(ns).DeleteCollection(ctx, del, metav1.ListOptions{LabelSelector: LabelJob}) // retried on the next poll
		}
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("deleting the benchmark's pods: %w", err)
	}
	nss, err := o.Kube.CoreV1().Namespaces().List(ctx, metav1.ListOptions{LabelSelector: LabelBench})
	if err != nil {
		return err
	}
	for _, ns := range nss.Items {
		if err := o.Kube.CoreV1().Namespaces().Delete(ctx, ns.Name, del); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("deleting namespace %s: %w", ns.Name, err)
		}
	}
	return nil
}

// Cleanup deletes the benchmark's pods and namespaces.
func Cleanup(ctx context.Context, o Options) error { return o.cleanup(ctx) }
