package cluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"github.com/volcano-vgpu/volcano-vgpu/e2e/sim/simconfig"
)

// kwokNodeAnnotation marks the nodes kwok manages.
const kwokNodeAnnotation = "kwok.x-k8s.io/node"

// Labels set on every simulated GPU node.
const (
	LabelSimulated = "volcano-vgpu.io/simulated"
	LabelGPUModel  = "volcano-vgpu.io/gpu-model"
)

// writeStages combines our stages with kwok's shipped fast node stage and
// pod-delete (not its pod-ready, which ours replaces to report container
// IDs, nor its pod-complete, which would finish every Job's pods at once)
// into the file kwok reads.
func (c Config) writeStages() error {
	var docs []string
	for _, name := range []string{"node-initialize.yaml", "pod-delete.yaml"} {
		data, err := os.ReadFile(filepath.Join(c.KwokStagesDir, name))
		if err != nil {
			return fmt.Errorf("kwok stage %s: %w (run `make build`: it copies kwok's stages)", name, err)
		}
		docs = append(docs, string(data))
	}
	ours, err := os.ReadFile(c.StagesFile)
	if err != nil {
		return err
	}
	docs = append(docs, string(ours))
	return os.WriteFile(filepath.Join(c.StateDir, "kwok-stages.yaml"), []byte(strings.Join(docs, "\n---\n")), 0o644)
}

// NodeObject is the kwok node for a simulated node: CPU, memory and pods
// only. GPU resources are added by the node's device plugin (vgpu-memory,
// vgpu-cores) and kubelet emulator (vgpu-number), as on a real node.
func NodeObject(n simconfig.Node) *corev1.Node {
	labels := map[string]string{
		"kubernetes.io/hostname": n.Name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
		"type": "kwok", LabelSimulated: "true", LabelGPUModel: strings.ReplaceAll(n.GPUs[0].Model, " ", "-"),
	}
	for k, v := range n.Labels {
		labels[k] = v
	}
	res := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse(n.CPU),
		corev1.ResourceMemory: resource.MustParse(n.Memory),
		corev1.ResourcePods:   *resource.NewQuantity(int64(n.Pods), resource.DecimalSI),
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: n.Name, Labels: labels, Annotations: map[string]string{kwokNodeAnnotation: "fake"}},
		Status:     corev1.NodeStatus{Capacity: res, Allocatable: res.DeepCopy()},
	}
}

// ensureNodes creates the simulated nodes that do not exist yet and deletes
// simulated nodes the cluster file does not name: a cluster reused after a
// run with a larger file (its etcd is kept) would otherwise keep the other
// file's nodes, Ready under kwok, in every setup's capacity.
func (cl *Cluster) ensureNodes(ctx context.Context) error {
	want := make(map[string]bool, len(cl.Nodes))
	for _, n := range cl.Nodes {
		want[n.Name] = true
	}
	l, err := cl.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: LabelSimulated + "=true"})
	if err != nil {
		return fmt.Errorf("list simulated nodes: %w", err)
	}
	stale := 0
	for _, n := range l.Items {
		if want[n.Name] {
			continue
		}
		if err := cl.Client.CoreV1().Nodes().Delete(ctx, n.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete node %s, which %s does not name: %w", n.Name, cl.Config.SimFile, err)
		}
		stale++
	}
	if stale > 0 {
		klog.FromContext(ctx).Info("Deleted simulated nodes the cluster file does not name", "nodes", stale, "file", cl.Config.SimFile)
	}
	for _, n := range cl.Nodes {
		_, err := cl.Client.CoreV1().Nodes().Create(ctx, NodeObject(n), metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create node %s: %w", n.Name, err)
		}
	}
	return nil
}
