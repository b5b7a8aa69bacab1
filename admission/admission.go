// Package admission is the vGPU admission webhook: for every pod created it
// (a) rewrites vGPU memory and cores to totals over each container's GPUs,
// recording the per-GPU asks in the api.RequestsKey annotation, so Volcano's
// proportion and capacity plugins count what a pod really holds in queues
// (a 2-GPU × 8192 MiB container counts 16384 MiB); (b) refuses a malformed
// vGPU request or annotation with the message a person needs; and (c) sets
// the scheduler name of vGPU pods that name none, when configured.
package admission

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/volcano-vgpu/volcano-vgpu/api"
	"github.com/volcano-vgpu/volcano-vgpu/podrequest"
)

// Options configure Mutate.
type Options struct {
	Names api.ResourceNames
	// SchedulerName is set on vGPU pods that name no scheduler or the
	// default one; "" leaves them as they are.
	SchedulerName string
	// GPUMemoryMiB is the smallest memory of the cluster's GPUs whose model
	// passes the filters (api.ModelMatches, as the scheduler matches them):
	// what a percentage or whole-GPU ask is counted at, so the
	// total fits every node that could hold the pod. ok is false when no GPU
	// matches (no inventory published yet).
	GPUMemoryMiB func(include, exclude []string) (mib int64, ok bool)
}

// Op is one JSON patch operation.
type Op struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value,omitempty"`
}

// Denied is a refusal to admit the pod, with the reason for its creator.
type Denied struct{ Reason string }

func (d *Denied) Error() string { return d.Reason }

// Mutate returns the patch for a pod being created, and warnings for its
// creator; a *Denied error refuses the pod.
func Mutate(pod *corev1.Pod, o Options) ([]Op, []string, error) {
	// Volcano deviceshare reads a container asking vgpu-memory without
	// vgpu-number as one GPU; kubelet only calls the device plugin for
	// containers that request the number, so add it (on a copy: ops below).
	pod, ops := withNumber(pod, o.Names)
	asks, admitted, err := podrequest.Parse(pod, o.Names)
	if err != nil {
		return nil, nil, &Denied{Reason: "invalid vGPU request: " + err.Error()}
	}
	if len(asks) == 0 {
		return ops, nil, nil
	}
	opts, err := api.ParsePodOptions(pod.Annotations)
	if err != nil {
		return nil, nil, &Denied{Reason: "invalid vGPU request: " + err.Error()}
	}
	if why := migProfileTooSmall(opts.MIGProfile, asks); why != "" {
		return nil, nil, &Denied{Reason: "invalid vGPU request: " + why}
	}
	var warnings []string
	if o.SchedulerName != "" && (pod.Spec.SchedulerName == "" || pod.Spec.SchedulerName == corev1.DefaultSchedulerName) {
		ops = append(ops, Op{Op: "add", Path: "/spec/schedulerName", Value: o.SchedulerName})
	}
	if admitted { // created from an admitted pod's manifest: already totals, and consistent
		return ops, nil, nil
	}
	reqs := api.Requests{Containers: make([]api.ContainerRequest, 0, len(asks))}
	for _, a := range asks {
		r := a.ContainerRequest
		if r.MemoryPercent > 0 || r.WholeMemory() {
			mib, ok := o.GPUMemoryMiB(opts.TypeInclude, opts.TypeExclude)
			if !ok {
				warnings = append(warnings, fmt.Sprintf("no GPU node publishes an inventory matching the pod's GPU filters yet: "+
					"%s and %s stay per GPU, so queues count this pod's GPU memory low", o.Names.Memory, o.Names.Cores))
				return ops, warnings, nil
			}
			r.GPUMemoryMiB = mib
		}
		reqs.Containers = append(reqs.Containers, r)
	}
	value, err := api.EncodeRequests(reqs)
	if err != nil {
		return nil, nil, &Denied{Reason: "invalid vGPU request: " + err.Error()}
	}
	for _, r := range reqs.Containers {
		mem, cores := r.Totals()
		c, path := container(pod, r.Name, r.Init)
		ops = append(ops, setResource(c, path, o.Names.Memory, mem)...)
		ops = append(ops, setResource(c, path, o.Names.Cores, cores)...)
	}
	if pod.Annotations == nil {
		ops = append(ops, Op{Op: "add", Path: "/metadata/annotations", Value: map[string]string{api.RequestsKey: value}})
	} else {
		ops = append(ops, Op{Op: "add", Path: "/metadata/annotations/" + escape(api.RequestsKey), Value: value})
	}
	return ops, warnings, nil
}

// withNumber returns pod with vgpu-number 1 added to every container that
// asks vgpu-memory without it, and the ops that add it.
func withNumber(pod *corev1.Pod, names api.ResourceNames) (*corev1.Pod, []Op) {
	var ops []Op
	var out *corev1.Pod
	for _, f := range []struct {
		field string
		init  bool
	}{{"initContainers", true}, {"containers", false}} {
		list := pod.Spec.Containers
		if f.init {
			list = pod.Spec.InitContainers
		}
		for i := range list {
			c := &list[i]
			_, hasN := c.Resources.Limits[corev1.ResourceName(names.Number)]
			_, hasNReq := c.Resources.Requests[corev1.ResourceName(names.Number)]
			_, hasMem := c.Resources.Limits[corev1.ResourceName(names.Memory)]
			_, hasMemReq := c.Resources.Requests[corev1.ResourceName(names.Memory)]
			if hasN || hasNReq || !(hasMem || hasMemReq) {
				continue
			}
			if out == nil {
				out = pod.DeepCopy()
			}
			dst := &out.Spec.Containers[i]
			if f.init {
				dst = &out.Spec.InitContainers[i]
			}
			path := fmt.Sprintf("/spec/%s/%d", f.field, i)
			one := resource.MustParse("1")
			if dst.Resources.Limits != nil {
				dst.Resources.Limits[corev1.ResourceName(names.Number)] = one
				ops = append(ops, Op{Op: "add", Path: path + "/resources/limits/" + escape(names.Number), Value: "1"})
			}
			if dst.Resources.Requests != nil {
				dst.Resources.Requests[corev1.ResourceName(names.Number)] = one
				ops = append(ops, Op{Op: "add", Path: path + "/resources/requests/" + escape(names.Number), Value: "1"})
			}
		}
	}
	if out == nil {
		return pod, nil
	}
	return out, ops
}

// container finds a container and its JSON pointer.
func container(pod *corev1.Pod, name string, init bool) (*corev1.Container, string) {
	list, field := pod.Spec.Containers, "containers"
	if init {
		list, field = pod.Spec.InitContainers, "initContainers"
	}
	for i := range list {
		if list[i].Name == name {
			return &list[i], fmt.Sprintf("/spec/%s/%d", field, i)
		}
	}
	return nil, "" // Parse found it: unreachable
}

// setResource sets a resource to v wherever the container states resources:
// limits (extended resources must have them) and requests, which
// kube-apiserver defaulted from the limits before admission, so the two
// never disagree. A zero total is left out.
func setResource(c *corev1.Container, path, name string, v int64) []Op {
	if c == nil || v == 0 {
		return nil
	}
	q := fmt.Sprint(v)
	var ops []Op
	if c.Resources.Limits != nil {
		ops = append(ops, Op{Op: "add", Path: path + "/resources/limits/" + escape(name), Value: q})
	}
	if c.Resources.Requests != nil {
		ops = append(ops, Op{Op: "add", Path: path + "/resources/requests/" + escape(name), Value: q})
	}
	return ops
}

// escape renders a map key as a JSON pointer token (RFC 6901).
func escape(s string) string {
	return strings.NewReplacer("~", "~0", "/", "~1").Replace(s)
}
