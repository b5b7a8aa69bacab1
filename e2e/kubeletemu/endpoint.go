package kubeletemu

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// registration is the node's Registration service.
type registration struct {
	pluginapi.UnimplementedRegistrationServer
	node *Node
	ctx  context.Context
}

var _ pluginapi.RegistrationServer = (*registration)(nil)

func (r *registration) Register(_ context.Context, req *pluginapi.RegisterRequest) (*pluginapi.Empty, error) {
	n := r.node
	if req.Version != pluginapi.Version {
		return nil, fmt.Errorf("unsupported API version %q, kubelet speaks %s", req.Version, pluginapi.Version)
	}
	if req.ResourceName == "" || filepath.Base(req.Endpoint) != req.Endpoint {
		return nil, fmt.Errorf("invalid registration: resource %q, endpoint %q (a file name in %s)", req.ResourceName, req.Endpoint, n.PluginsDir())
	}
	conn, err := grpc.NewClient("unix://"+filepath.Join(n.PluginsDir(), req.Endpoint), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	ep := &endpoint{
		node: n, resource: req.ResourceName, options: req.Options, conn: conn,
		client: pluginapi.NewDevicePluginClient(conn), all: map[string]*pluginapi.Device{}, done: make(chan struct{}), listed: make(chan struct{}),
	}
	if ep.options == nil {
		ep.options = &pluginapi.DevicePluginOptions{}
	}
	n.mu.Lock()
	old := n.endpoints[req.ResourceName]
	n.endpoints[req.ResourceName] = ep
	close(n.registered)
	n.registered = make(chan struct{})
	n.mu.Unlock()
	if old != nil {
		old.stop()
	}
	go ep.listAndWatch(r.ctx)
	klog.FromContext(r.ctx).Info("Plugin registered", "node", n.name, "resource", req.ResourceName, "endpoint", req.Endpoint,
		"preStartRequired", ep.options.PreStartRequired, "preferredAllocation", ep.options.GetPreferredAllocationAvailable)
	return &pluginapi.Empty{}, nil
}

// endpoint is kubelet's connection to one plugin.
type endpoint struct {
	node     *Node
	resource string
	options  *pluginapi.DevicePluginOptions
	conn     *grpc.ClientConn
	client   pluginapi.DevicePluginClient

	mu       sync.Mutex
	all      map[string]*pluginapi.Device
	done     chan struct{}
	isDone   bool
	listed   chan struct{} // closed at the first ListAndWatch answer
	isListed bool
	lastCaps [2]int
}

func (e *endpoint) stop() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.isDone {
		e.isDone = true
		close(e.done)
		_ = e.conn.Close()
	}
}

func (e *endpoint) stopped() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.isDone
}

func (e *endpoint) healthy() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []string
	for id, d := range e.all {
		if d.Health == pluginapi.Healthy {
			out = append(out, id)
		}
	}
	sort.Strings(out)
	return out
}

// listAndWatch keeps the device list and the node status in step.
func (e *endpoint) listAndWatch(ctx context.Context) {
	logger := klog.FromContext(ctx).WithValues("node", e.node.name, "resource", e.resource)
	defer e.stop()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-e.done:
			cancel()
		case <-ctx.Done():
		}
	}()
	stream, err := e.client.ListAndWatch(ctx, &pluginapi.Empty{})
	if err != nil {
		logger.Error(err, "ListAndWatch failed")
		return
	}
	for {
		resp, err := stream.Recv()
		if err != nil {
			if ctx.Err() == nil {
				logger.Info("ListAndWatch ended; the plugin is gone until it registers again", "err", err)
			}
			return
		}
		e.mu.Lock()
		e.all = make(map[string]*pluginapi.Device, len(resp.Devices))
		healthy := 0
		for _, d := range resp.Devices {
			e.all[d.ID] = d
			if d.Health == pluginapi.Healthy {
				healthy++
			}
		}
		caps := [2]int{len(resp.Devices), healthy}
		changed := caps != e.lastCaps
		if !e.isListed {
			e.isListed = true
			close(e.listed)
		}
		e.mu.Unlock()
		logger.V(4).Info("ListAndWatch update", "devices", caps[0], "healthy", caps[1])
		if changed {
			// kubelet keeps syncing node status until it lands; so do we, or a
			// patch lost to a busy apiserver (a thousand nodes registering at
			// once) would leave the node without the resource for good.
			for attempt := 0; ; attempt++ {
				err := e.patchNode(ctx, caps[0], caps[1])
				if err == nil {
					break
				}
				logger.Error(err, "Patching node capacity; retrying", "attempt", attempt+1)
				select {
				case <-ctx.Done():
					return
				case <-time.After(min(time.Second<<min(attempt, 4), 10*time.Second)):
				}
			}
			e.mu.Lock()
			e.lastCaps = caps
			e.mu.Unlock()
		}
	}
}

// patchNode sets capacity (all devices) and allocatable (healthy ones).
func (e *endpoint) patchNode(ctx context.Context, capacity, allocatable int) error {
	body, _ := json.Marshal(map[string]any{"status": map[string]any{
		"capacity":    map[string]string{e.resource: fmt.Sprint(capacity)},
		"allocatable": map[string]string{e.resource: fmt.Sprint(allocatable)},
	}})
	_, err := e.node.client.CoreV1().Nodes().Patch(ctx, e.node.name, types.MergePatchType, body, metav1.PatchOptions{}, "status")
	return err
}
