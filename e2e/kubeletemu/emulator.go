package kubeletemu

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// MaxSocketPath is the longest unix socket path Linux accepts.
const MaxSocketPath = 107

// Options configure an emulator.
type Options struct {
	Client  kubernetes.Interface
	BaseDir string
	Nodes   []string
	// Resources are device-plugin resources a pod may request before their
	// plugin has registered: admission waits up to RegisterWait for it.
	// Other extended resources count only once a plugin registers them.
	// Default: volcano.sh/vgpu-number.
	Resources []string
	// RegisterWait bounds that wait (default 30s).
	RegisterWait time.Duration
}

// Emulator serves the kubelet device-plugin APIs of many nodes.
type Emulator struct {
	opts  Options
	nodes map[string]*Node
	ready chan struct{}
}

// New validates the layout and prepares the nodes; Run serves them.
func New(o Options) (*Emulator, error) {
	if o.RegisterWait <= 0 {
		o.RegisterWait = 30 * time.Second
	}
	if len(o.Resources) == 0 {
		o.Resources = []string{"volcano.sh/vgpu-number"}
	}
	if len(o.Nodes) == 0 {
		return nil, errors.New("kubelet emulator: no nodes given")
	}
	e := &Emulator{opts: o, nodes: map[string]*Node{}, ready: make(chan struct{})}
	for _, n := range o.Nodes {
		if _, dup := e.nodes[n]; dup {
			return nil, fmt.Errorf("kubelet emulator: node %q given twice", n)
		}
		node := newNode(o, n)
		for _, p := range []string{node.KubeletSocket(), node.PodResourcesSocket(), filepath.Join(node.PluginsDir(), "volcano-vgpu.sock")} {
			if len(p) > MaxSocketPath {
				return nil, fmt.Errorf("kubelet emulator: socket path %s is %d bytes, Linux allows %d: use a shorter base directory", p, len(p), MaxSocketPath)
			}
		}
		e.nodes[n] = node
	}
	return e, nil
}

// Ready is closed once every node is served and the pod cache is synced.
func (e *Emulator) Ready() <-chan struct{} { return e.ready }

// Node returns one node's emulator.
func (e *Emulator) Node(name string) *Node { return e.nodes[name] }

// Run serves every node until ctx ends.
func (e *Emulator) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make(chan error, len(e.nodes))
	for _, n := range e.nodes {
		if err := n.start(ctx, &wg); err != nil {
			return err
		}
	}
	factory := informers.NewSharedInformerFactoryWithOptions(e.opts.Client, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermNotEqualSelector("spec.nodeName", "").String()
	}))
	inf := factory.Core().V1().Pods().Informer()
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { e.onPod(obj, false) },
		UpdateFunc: func(_, obj any) { e.onPod(obj, false) },
		DeleteFunc: func(obj any) {
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			e.onPod(obj, true)
		},
	}); err != nil {
		return err
	}
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return fmt.Errorf("pod cache did not sync: %w", context.Cause(ctx))
	}
	live := map[string]bool{}
	for _, obj := range inf.GetStore().List() {
		if pod, ok := obj.(*corev1.Pod); ok {
			live[string(pod.UID)] = true
		}
	}
	// Admissions start only now: until the restored devices of pods deleted
	// while the emulator was down are dropped, they would count as in use
	// (kubelet's device manager drops inactive pods before every allocation).
	for _, n := range e.nodes {
		n.pruneRestored(live)
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := n.run(ctx); err != nil {
				errs <- fmt.Errorf("node %s: %w", n.name, err)
			}
		}()
	}
	close(e.ready)
	logger.Info("Kubelet emulator serving", "nodes", len(e.nodes), "baseDir", e.opts.BaseDir)
	select {
	case <-ctx.Done():
		return nil
	case err := <-errs:
		return err
	}
}

func (e *Emulator) onPod(obj any, deleted bool) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	n := e.nodes[pod.Spec.NodeName]
	if n == nil {
		return
	}
	if deleted || pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		n.release(pod)
		return
	}
	n.enqueue(pod)
}

// ensureDir creates a directory.
func ensureDir(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("kubelet emulator: %w", err)
	}
	return nil
}
