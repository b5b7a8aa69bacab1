package kubeletemu

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"time"

	"google.golang.org/grpc"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// Node is the emulated kubelet of one node.
type Node struct {
	name, dir    string
	client       kubernetes.Interface
	registerWait time.Duration
	expected     []string
	queue        chan *corev1.Pod

	mu         sync.Mutex
	endpoints  map[string]*endpoint          // resource → plugin
	registered chan struct{}                 // closed at the next registration
	podDevices map[string]map[string]devices // pod UID → container → resource → IDs
	pods       map[string]*corev1.Pod        // the pod manager: admitted (or being admitted) pods
	seen       map[string]bool               // pods queued or admitted once
	released   map[string]bool               // pods released before admission
}

// devices maps a resource to its IDs.
type devices map[string][]string

func newNode(o Options, name string) *Node {
	return &Node{
		name: name, dir: filepath.Join(o.BaseDir, name), client: o.Client, registerWait: o.RegisterWait, expected: o.Resources,
		queue: make(chan *corev1.Pod, 4096), endpoints: map[string]*endpoint{}, registered: make(chan struct{}),
		podDevices: map[string]map[string]devices{}, pods: map[string]*corev1.Pod{}, seen: map[string]bool{}, released: map[string]bool{},
	}
}

// PluginsDir is the node's device-plugins directory.
func (n *Node) PluginsDir() string { return filepath.Join(n.dir, "device-plugins") }

// KubeletSocket is the node's registration socket.
func (n *Node) KubeletSocket() string { return filepath.Join(n.PluginsDir(), "kubelet.sock") }

// PodResourcesSocket is the node's PodResources socket.
func (n *Node) PodResourcesSocket() string {
	return filepath.Join(n.dir, "pod-resources", "kubelet.sock")
}

// RecordsDir holds one JSON record per pod.
func (n *Node) RecordsDir() string { return filepath.Join(n.dir, "records") }

// start cleans the device-plugins directory as kubelet does at start,
// restores earlier admissions, and serves the two kubelet sockets until ctx
// ends. The servers stop (and their listeners unlink the socket files) under
// wg, so Run returns only after that: an emulator started next cannot have its
// fresh sockets unlinked by a previous one still shutting down.
func (n *Node) start(ctx context.Context, wg *sync.WaitGroup) error {
	for _, d := range []string{n.PluginsDir(), filepath.Dir(n.PodResourcesSocket()), n.RecordsDir()} {
		if err := ensureDir(d); err != nil {
			return err
		}
	}
	entries, err := os.ReadDir(n.PluginsDir())
	if err != nil {
		return err
	}
	for _, e := range entries {
		if !e.IsDir() {
			_ = os.Remove(filepath.Join(n.PluginsDir(), e.Name()))
		}
	}
	_ = os.Remove(n.PodResourcesSocket())
	n.restore(ctx)
	reg := grpc.NewServer()
	pluginapi.RegisterRegistrationServer(reg, &registration{node: n, ctx: ctx})
	pr := grpc.NewServer()
	podresourcesv1.RegisterPodResourcesListerServer(pr, &podResources{node: n})
	for _, s := range []struct {
		srv  *grpc.Server
		path string
	}{{pr, n.PodResourcesSocket()}, {reg, n.KubeletSocket()}} {
		lis, err := net.Listen("unix", s.path)
		if err != nil {
			return fmt.Errorf("kubelet emulator, node %s: %w", n.name, err)
		}
		wg.Add(2)
		go func() { defer wg.Done(); _ = s.srv.Serve(lis) }()
		go func() {
			defer wg.Done()
			<-ctx.Done()
			s.srv.Stop()
		}()
	}
	klog.FromContext(ctx).V(2).Info("Emulated kubelet sockets ready", "node", n.name, "kubeletSocket", n.KubeletSocket(), "podResources", n.PodResourcesSocket())
	return nil
}

// restore re-adopts pods admitted by an earlier run (kubelet's checkpoint).
func (n *Node) restore(ctx context.Context) {
	recs, err := readRecords(n.RecordsDir())
	if err != nil {
		klog.FromContext(ctx).Error(err, "Reading earlier pod records", "node", n.name)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, r := range recs {
		if !r.Admitted {
			continue
		}
		n.seen[r.PodUID] = true
		n.podDevices[r.PodUID] = map[string]devices{}
		for _, c := range r.Containers {
			if c.AllocateError == "" && len(c.DeviceIDs) > 0 {
				if n.podDevices[r.PodUID][c.Name] == nil {
					n.podDevices[r.PodUID][c.Name] = devices{}
				}
				n.podDevices[r.PodUID][c.Name][c.Resource] = c.DeviceIDs
			}
		}
	}
}

// pruneRestored releases restored pods that were deleted while the
// emulator was down.
func (n *Node) pruneRestored(live map[string]bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for uid := range n.podDevices {
		if !live[uid] {
			delete(n.podDevices, uid)
			delete(n.pods, uid)
		}
	}
}

// enqueue queues a pod for admission once.
func (n *Node) enqueue(pod *corev1.Pod) {
	n.mu.Lock()
	uid := string(pod.UID)
	if n.seen[uid] {
		// Refresh the pod manager's copy; a pod restored after a restart
		// (devices but no pod object yet) rejoins it here.
		if _, ok := n.pods[uid]; ok || n.podDevices[uid] != nil {
			n.pods[uid] = pod
		}
		n.mu.Unlock()
		return
	}
	n.seen[uid] = true
	n.mu.Unlock()
	n.queue <- pod
}

// release frees a deleted or terminal pod's devices.
func (n *Node) release(pod *corev1.Pod) {
	n.mu.Lock()
	defer n.mu.Unlock()
	uid := string(pod.UID)
	delete(n.pods, uid)
	delete(n.podDevices, uid)
	if n.seen[uid] {
		n.released[uid] = true
	}
}

// run admits queued pods one at a time.
func (n *Node) run(ctx context.Context) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case pod := <-n.queue:
			n.admit(ctx, pod)
		}
	}
}

// inUse returns every device ID held by a pod, per resource.
func (n *Node) inUse(resource string) map[string]bool {
	out := map[string]bool{}
	for _, cs := range n.podDevices {
		for _, d := range cs {
			for _, id := range d[resource] {
				out[id] = true
			}
		}
	}
	return out
}

// waitEndpoint returns the resource's live plugin once it has listed its
// devices, waiting for a (re-)registration.
func (n *Node) waitEndpoint(ctx context.Context, resource string) (*endpoint, error) {
	deadline := time.After(n.registerWait)
	for {
		n.mu.Lock()
		ep, ch := n.endpoints[resource], n.registered
		n.mu.Unlock()
		if ep != nil && !ep.stopped() {
			select {
			case <-ep.listed:
				return ep, nil
			default:
			}
		}
		var listed <-chan struct{} // nil (never ready) unless a live endpoint exists
		if ep != nil && !ep.stopped() {
			listed = ep.listed
		}
		select {
		case <-ch:
		case <-listed:
		case <-deadline:
			if ep == nil {
				return nil, fmt.Errorf("cannot allocate unregistered device %s", resource)
			}
			return nil, fmt.Errorf("endpoint of %s has been stopped", resource)
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// isPluginResource reports whether a plugin registered the resource.
func (n *Node) isPluginResource(resource string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	_, ok := n.endpoints[resource]
	return ok
}

// Resources lists the registered resources.
func (n *Node) Resources() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := make([]string, 0, len(n.endpoints))
	for r := range n.endpoints {
		out = append(out, r)
	}
	sort.Strings(out)
	return out
}

// Healthy returns the healthy device IDs of a resource, sorted.
func (n *Node) Healthy(resource string) []string {
	n.mu.Lock()
	ep := n.endpoints[resource]
	n.mu.Unlock()
	if ep == nil {
		return nil
	}
	return ep.healthy()
}

// Allocated returns the devices kubelet holds for a pod's container.
func (n *Node) Allocated(podUID, container, resource string) []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.Clone(n.podDevices[podUID][container][resource])
}

// expects reports whether a resource is a device-plugin resource even
// before its plugin registers.
func (n *Node) expects(resource string) bool { return slices.Contains(n.expected, resource) }
