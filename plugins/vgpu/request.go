package vgpu

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"

	"github.com/volcano-vgpu/volcano-vgpu/api"
	"github.com/volcano-vgpu/volcano-vgpu/plugins/placement"
)

// requestOf translates a pod into the placement core's Request and the node
// policy that orders nodes for it (its annotation, else the argument). It
// returns a nil Request for a pod that asks no vGPU. A malformed ask or
// annotation is an error that names the container or annotation and what was
// expected.
func requestOf(pod *corev1.Pod, a *Args) (*placement.Request, placement.Policy, error) {
	req, opts, err := parseRequest(pod, a)
	if err != nil || req == nil {
		return nil, "", err
	}
	policy := a.NodePolicy
	if opts.NodePolicy != "" {
		policy = opts.NodePolicy
	}
	return req, policy, nil
}

func parseRequest(pod *corev1.Pod, a *Args) (*placement.Request, api.PodOptions, error) {
	req := &placement.Request{}
	add := func(c *corev1.Container, init bool) error {
		q := func(name string) (int64, bool) {
			if v, ok := c.Resources.Limits[corev1.ResourceName(name)]; ok {
				return v.Value(), true
			}
			v, ok := c.Resources.Requests[corev1.ResourceName(name)]
			return v.Value(), ok
		}
		n, hasN := q(a.Resources.Number)
		mem, hasMem := q(a.Resources.Memory)
		pct, hasPct := q(a.Resources.MemoryPercentage)
		cores, hasCores := q(a.Resources.Cores)
		if !hasN {
			switch {
			case hasMem:
				// deviceshare reads this as one GPU; kubelet, though, calls the
				// device plugin only for containers that request the number.
				return fmt.Errorf("container %q asks %s without %s (Volcano deviceshare reads that as 1 GPU): add %s: 1, "+
					"since kubelet hands GPUs only to containers that request %s", c.Name, a.Resources.Memory, a.Resources.Number,
					a.Resources.Number, a.Resources.Number)
			case hasPct || hasCores:
				return fmt.Errorf("container %q asks %s/%s without %s: add %s (GPUs per container)",
					c.Name, a.Resources.MemoryPercentage, a.Resources.Cores, a.Resources.Number, a.Resources.Number)
			}
			return nil
		}
		switch {
		case n < 1 || n > placement.MaxGPUs:
			return fmt.Errorf("container %q: %s=%d, expected 1 to %d", c.Name, a.Resources.Number, n, placement.MaxGPUs)
		case hasMem && mem < 1:
			return fmt.Errorf("container %q: %s=%d, expected a positive number of MiB per GPU", c.Name, a.Resources.Memory, mem)
		case hasPct && (pct < 1 || pct > 100):
			return fmt.Errorf("container %q: %s=%d, expected 1 to 100", c.Name, a.Resources.MemoryPercentage, pct)
		case hasCores && (cores < 0 || cores > 100):
			return fmt.Errorf("container %q: %s=%d, expected 0 to 100 (percent of one GPU; 100 = exclusive)", c.Name, a.Resources.Cores, cores)
		}
		req.Containers = append(req.Containers, placement.Container{
			Name: c.Name, Init: init, Restartable: init && restartable(c), Number: int(n), MemoryMiB: mem, MemoryPercent: int(pct), Cores: int(cores),
		})
		return nil
	}
	for i := range pod.Spec.InitContainers {
		if err := add(&pod.Spec.InitContainers[i], true); err != nil {
			return nil, api.PodOptions{}, err
		}
	}
	for i := range pod.Spec.Containers {
		if err := add(&pod.Spec.Containers[i], false); err != nil {
			return nil, api.PodOptions{}, err
		}
	}
	if len(req.Containers) == 0 {
		return nil, api.PodOptions{}, nil
	}
	opts, err := api.ParsePodOptions(pod.Annotations)
	if err != nil {
		return nil, api.PodOptions{}, err
	}
	req.TypeInclude, req.TypeExclude = opts.TypeInclude, opts.TypeExclude
	req.UUIDInclude, req.UUIDExclude = opts.UUIDInclude, opts.UUIDExclude
	req.Topology, req.DevicePolicy = opts.Topology, opts.DevicePolicy
	if err := req.Normalize(placement.Defaults{Cores: a.DefaultCores, DevicePolicy: a.DevicePolicy, Topology: a.Topology}); err != nil {
		return nil, api.PodOptions{}, err
	}
	return req, opts, nil
}

// restartable: an init container with restartPolicy Always, Kubernetes'
// native sidecar, which keeps running beside the app containers.
func restartable(c *corev1.Container) bool {
	return c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways
}
