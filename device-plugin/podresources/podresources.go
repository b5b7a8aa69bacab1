// Package podresources asks kubelet's PodResources API (v1) which pods it
// knows and which device IDs each container got. Allocate uses it to tell
// apart pods that match a request equally well (kubelet lists the pod it is
// admitting, not the ones it has not reached yet); PreStartContainer uses it
// to check that the container got the IDs Allocate served.
package podresources

import (
	"context"
	"fmt"
	"sort"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// Lister is the seam to kubelet.
type Lister interface {
	List(ctx context.Context) (Snapshot, error)
}

// Snapshot is one List answer for one resource.
type Snapshot struct {
	pods map[string]map[string][]string // namespace/name → container → sorted IDs
}

var _ Lister = (*Client)(nil)

// NewSnapshot builds a snapshot from a List response, keeping resource's IDs.
func NewSnapshot(resp *podresourcesv1.ListPodResourcesResponse, resource string) Snapshot {
	s := Snapshot{pods: make(map[string]map[string][]string, len(resp.GetPodResources()))}
	for _, p := range resp.GetPodResources() {
		cs := make(map[string][]string, len(p.GetContainers()))
		for _, c := range p.GetContainers() {
			var ids []string
			for _, d := range c.GetDevices() {
				if d.GetResourceName() == resource {
					ids = append(ids, d.GetDeviceIds()...)
				}
			}
			sort.Strings(ids)
			cs[c.GetName()] = ids
		}
		s.pods[p.GetNamespace()+"/"+p.GetName()] = cs
	}
	return s
}

// Known reports whether kubelet lists the pod.
func (s Snapshot) Known(namespace, name string) bool {
	_, ok := s.pods[namespace+"/"+name]
	return ok
}

// Pods lists "namespace/name" of every pod kubelet lists.
func (s Snapshot) Pods() []string {
	out := make([]string, 0, len(s.pods))
	for k := range s.pods {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// HasDevices reports whether any container of the pod ("namespace/name")
// holds IDs of the resource.
func (s Snapshot) HasDevices(pod string) bool {
	for _, ids := range s.pods[pod] {
		if len(ids) > 0 {
			return true
		}
	}
	return false
}

// Containers returns the listed containers of a pod with their sorted IDs
// (kubelet lists app containers and sidecars, not regular init containers).
func (s Snapshot) Containers(namespace, name string) (map[string][]string, bool) {
	c, ok := s.pods[namespace+"/"+name]
	return c, ok
}

// Holders returns "namespace/name/container" for every listed container
// holding any of ids.
func (s Snapshot) Holders(ids []string) []string {
	want := make(map[string]bool, len(ids))
	for _, id := range ids {
		want[id] = true
	}
	var out []string
	for pod, cs := range s.pods {
		for c, got := range cs {
			for _, id := range got {
				if want[id] {
					out = append(out, pod+"/"+c)
					break
				}
			}
		}
	}
	sort.Strings(out)
	return out
}

// Client talks to kubelet's PodResources socket.
type Client struct {
	socket   string
	resource string
	timeout  time.Duration
	conn     *grpc.ClientConn
	client   podresourcesv1.PodResourcesListerClient
}

// NewClient prepares a client; the connection is made lazily by gRPC.
func NewClient(socket, resource string, timeout time.Duration) (*Client, error) {
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("kubelet PodResources socket %s: %w", socket, err)
	}
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	return &Client{socket: socket, resource: resource, timeout: timeout, conn: conn, client: podresourcesv1.NewPodResourcesListerClient(conn)}, nil
}

// List asks kubelet for every pod's devices.
func (c *Client) List(ctx context.Context) (Snapshot, error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	resp, err := c.client.List(ctx, &podresourcesv1.ListPodResourcesRequest{})
	if err != nil {
		return Snapshot{}, fmt.Errorf("kubelet PodResources List on %s: %w", c.socket, err)
	}
	return NewSnapshot(resp, c.resource), nil
}

// Close closes the connection.
func (c *Client) Close() error { return c.conn.Close() }
