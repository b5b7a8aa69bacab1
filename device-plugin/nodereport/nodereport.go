// Package nodereport publishes what the scheduler and Volcano's queue
// accounting need on the Node: the inventory annotation (GPUs, links,
// heartbeat) and the node-level extended resources vgpu-memory and
// vgpu-cores in status capacity/allocatable. It patches only when
// something changed, plus a heartbeat on a long period.
package nodereport

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/volcano-vgpu/volcano-vgpu/api"
)

// Reporter publishes one node's report.
type Reporter struct {
	Client          kubernetes.Interface
	Node            string
	Names           api.ResourceNames
	Clock           clock.PassiveClock
	HeartbeatPeriod time.Duration
	// Extra, if set, returns more annotations to publish with the inventory
	// (the HAMi-format register annotation); it is called on every publish.
	Extra func(inv api.Inventory) (map[string]string, error)

	mu       sync.Mutex
	last     *api.Inventory // as last published, heartbeat zeroed
	lastAt   time.Time
	lastCaps corev1.ResourceList
}

// Totals returns vgpu-memory (MiB) and vgpu-cores (percent) over healthy GPUs.
func Totals(gpus []api.GPU) (memoryMiB, cores int64) {
	for _, g := range gpus {
		if g.Healthy {
			memoryMiB += g.MemoryMiB
			cores += 100
		}
	}
	return memoryMiB, cores
}

// Publish patches the node if inv (heartbeat ignored) differs from what was
// last published or the heartbeat is due; it reports whether it patched.
func (r *Reporter) Publish(ctx context.Context, inv api.Inventory) (bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.Clock.Now()
	cmpInv := inv
	cmpInv.Heartbeat, cmpInv.Version = time.Time{}, ""
	changed := r.last == nil || !reflect.DeepEqual(*r.last, cmpInv)
	if !changed && now.Sub(r.lastAt) < r.HeartbeatPeriod {
		return false, nil
	}
	inv.Heartbeat = now.UTC().Truncate(time.Second)
	value, err := api.EncodeInventory(inv)
	if err != nil {
		return false, fmt.Errorf("encoding the inventory of node %s: %w", r.Node, err)
	}
	ann := map[string]string{api.InventoryKey: value}
	if r.Extra != nil {
		extra, err := r.Extra(inv)
		if err != nil {
			return false, err
		}
		for k, v := range extra {
			ann[k] = v
		}
	}
	if err := r.patchAnnotations(ctx, ann); err != nil {
		return false, err
	}
	mem, cores := Totals(inv.GPUs)
	// vgpu-memory-percentage is per GPU like vgpu-cores: 100 per healthy GPU,
	// so pods asking a percentage pass Volcano's node resource check too.
	caps := corev1.ResourceList{
		corev1.ResourceName(r.Names.Memory):           *resource.NewQuantity(mem, resource.DecimalSI),
		corev1.ResourceName(r.Names.Cores):            *resource.NewQuantity(cores, resource.DecimalSI),
		corev1.ResourceName(r.Names.MemoryPercentage): *resource.NewQuantity(cores, resource.DecimalSI),
	}
	if changed || !equalResources(caps, r.lastCaps) || now.Sub(r.lastAt) >= r.HeartbeatPeriod {
		if err := r.patchCapacity(ctx, caps); err != nil {
			return false, err
		}
	}
	r.last, r.lastAt, r.lastCaps = &cmpInv, now, caps
	klog.FromContext(ctx).V(4).Info("Published node inventory", "node", r.Node, "changed", changed, "vgpuMemoryMiB", mem, "vgpuCores", cores)
	return true, nil
}

func (r *Reporter) patchAnnotations(ctx context.Context, ann map[string]string) error {
	return PatchAnnotations(ctx, r.Client, r.Node, ann)
}

// PatchAnnotations merge-patches annotations onto a node.
func PatchAnnotations(ctx context.Context, c kubernetes.Interface, node string, ann map[string]string) error {
	body, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": ann}})
	if err != nil {
		return err
	}
	if _, err := c.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, body, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("patching annotations of node %s: %w (the plugin's ServiceAccount needs patch on its node)", node, err)
	}
	return nil
}

func (r *Reporter) patchCapacity(ctx context.Context, caps corev1.ResourceList) error {
	body, err := json.Marshal(map[string]any{"status": map[string]any{"capacity": caps, "allocatable": caps}})
	if err != nil {
		return err
	}
	if _, err := r.Client.CoreV1().Nodes().Patch(ctx, r.Node, types.MergePatchType, body, metav1.PatchOptions{}, "status"); err != nil {
		return fmt.Errorf("patching status capacity of node %s: %w (the plugin's ServiceAccount needs patch on nodes/status)", r.Node, err)
	}
	return nil
}

func equalResources(a, b corev1.ResourceList) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || v.Cmp(w) != 0 {
			return false
		}
	}
	return true
}

// LastPublished is when the inventory was last published (zero: never).
func (r *Reporter) LastPublished() time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lastAt
}

// Run publishes current() whenever changed fires and checks every poll
// period (default 5s) whether the heartbeat is due or a failed publish must
// be retried, until ctx ends.
func (r *Reporter) Run(ctx context.Context, current func() api.Inventory, changed <-chan struct{}, poll time.Duration) {
	logger := klog.FromContext(ctx)
	if poll <= 0 {
		poll = 5 * time.Second
	}
	t := time.NewTicker(poll)
	defer t.Stop()
	publish := func() {
		if _, err := r.Publish(ctx, current()); err != nil {
			logger.Error(err, "Publishing the node report; will retry", "node", r.Node)
		}
	}
	publish()
	for {
		select {
		case <-ctx.Done():
			return
		case <-changed:
			publish()
		case <-t.C:
			publish()
		}
	}
}
