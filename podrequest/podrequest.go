// Package podrequest reads a pod's vGPU asks, per container and per GPU, for
// the scheduler plugin and the admission webhook alike.
//
// Without admission the pod's resources are the asks: vgpu-number GPUs, each
// with vgpu-memory MiB (or vgpu-memory-percentage) and vgpu-cores percent.
// The admission webhook rewrites vgpu-memory and vgpu-cores to totals over
// the container's GPUs, so Volcano's queues count what a pod really holds,
// and records the per-GPU asks in the api.RequestsKey annotation; Parse then
// reads them from there and checks that the resources are their totals.
package podrequest

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"

	"github.com/volcano-vgpu/volcano-vgpu/api"
)

// Ask is one container's vGPU ask, per GPU.
type Ask struct {
	api.ContainerRequest
	// Restartable: an init container with restartPolicy Always (a native
	// sidecar), which runs beside the app containers.
	Restartable bool
}

// Parse returns the pod's vGPU asks in declaration order (init containers
// first) and whether they come from admission (api.RequestsKey). A pod that
// asks no vGPU has none. Errors name the container, the resource or the
// annotation, and what was expected.
func Parse(pod *corev1.Pod, names api.ResourceNames) ([]Ask, bool, error) {
	var own []Ask
	err := each(pod, func(c *corev1.Container, init bool) error {
		a, ok, err := fromResources(c, init, names)
		if ok {
			own = append(own, a)
		}
		return err
	})
	if err != nil {
		return nil, false, err
	}
	value, admitted := pod.Annotations[api.RequestsKey]
	if !admitted {
		for _, a := range own {
			if a.Cores > 100 {
				return nil, false, coresErr(a.Name, names, int64(a.Cores))
			}
		}
		return own, false, nil
	}
	reqs, err := api.DecodeRequests(value)
	if err != nil {
		return nil, true, err
	}
	// The resources now carry totals: each must be what the recorded per-GPU
	// ask adds up to, so the annotation cannot say more than the queue counts.
	out := make([]Ask, 0, len(own))
	for _, a := range own {
		r, ok := reqs.Container(a.Name, a.Init)
		if !ok {
			return nil, true, fmt.Errorf("%s lists no %s container %q, which asks %s", api.RequestsKey, kind(a.Init), a.Name, names.Number)
		}
		mem, cores := r.Totals()
		switch {
		case r.Number != a.Number:
			return nil, true, mismatch(a, names.Number, int64(a.Number), int64(r.Number))
		case a.MemoryMiB != mem && !(mem == 0 && a.MemoryMiB == 0):
			return nil, true, mismatch(a, names.Memory, a.MemoryMiB, mem)
		case int64(a.Cores) != cores && !(cores == 0 && a.Cores == 0):
			return nil, true, mismatch(a, names.Cores, int64(a.Cores), cores)
		}
		out = append(out, Ask{ContainerRequest: r, Restartable: a.Restartable})
	}
	if len(out) != len(reqs.Containers) {
		return nil, true, fmt.Errorf("%s lists %d containers, the pod has %d asking %s", api.RequestsKey, len(reqs.Containers), len(out), names.Number)
	}
	return out, true, nil
}

func coresErr(container string, names api.ResourceNames, cores int64) error {
	return fmt.Errorf("container %q: %s=%d, expected 0 to 100 (percent of one GPU; 100 = exclusive)", container, names.Cores, cores)
}

func mismatch(a Ask, resource string, have, want int64) error {
	return fmt.Errorf("%s container %q has %s=%d but %s says its asks add up to %d; recreate the pod (the admission webhook writes both)",
		kind(a.Init), a.Name, resource, have, api.RequestsKey, want)
}

func kind(init bool) string {
	if init {
		return "init"
	}
	return "app"
}

func each(pod *corev1.Pod, f func(c *corev1.Container, init bool) error) error {
	for i := range pod.Spec.InitContainers {
		if err := f(&pod.Spec.InitContainers[i], true); err != nil {
			return err
		}
	}
	for i := range pod.Spec.Containers {
		if err := f(&pod.Spec.Containers[i], false); err != nil {
			return err
		}
	}
	return nil
}

// quantity is a container's value of a resource: its limit, else its request.
func quantity(c *corev1.Container, name string) (int64, bool) {
	if v, ok := c.Resources.Limits[corev1.ResourceName(name)]; ok {
		return v.Value(), true
	}
	v, ok := c.Resources.Requests[corev1.ResourceName(name)]
	return v.Value(), ok
}

// fromResources reads a container's ask from its resources; ok is false for
// a container that asks no vGPU.
func fromResources(c *corev1.Container, init bool, names api.ResourceNames) (Ask, bool, error) {
	n, hasN := quantity(c, names.Number)
	mem, hasMem := quantity(c, names.Memory)
	pct, hasPct := quantity(c, names.MemoryPercentage)
	cores, hasCores := quantity(c, names.Cores)
	if !hasN {
		switch {
		case hasMem:
			// deviceshare reads this as one GPU; kubelet, though, calls the
			// device plugin only for containers that request the number.
			return Ask{}, false, fmt.Errorf("container %q asks %s without %s (Volcano deviceshare reads that as 1 GPU): add %s: 1, "+
				"since kubelet hands GPUs only to containers that request %s", c.Name, names.Memory, names.Number, names.Number, names.Number)
		case hasPct || hasCores:
			return Ask{}, false, fmt.Errorf("container %q asks %s/%s without %s: add %s (GPUs per container)",
				c.Name, names.MemoryPercentage, names.Cores, names.Number, names.Number)
		}
		return Ask{}, false, nil
	}
	switch {
	case n < 1 || n > api.MaxRequestGPUs:
		return Ask{}, false, fmt.Errorf("container %q: %s=%d, expected 1 to %d", c.Name, names.Number, n, api.MaxRequestGPUs)
	case hasMem && mem < 1:
		return Ask{}, false, fmt.Errorf("container %q: %s=%d, expected a positive number of MiB per GPU", c.Name, names.Memory, mem)
	case hasPct && (pct < 1 || pct > 100):
		return Ask{}, false, fmt.Errorf("container %q: %s=%d, expected 1 to 100", c.Name, names.MemoryPercentage, pct)
	case hasCores && cores < 0:
		return Ask{}, false, coresErr(c.Name, names, cores)
	}
	a := Ask{ContainerRequest: api.ContainerRequest{Name: c.Name, Init: init, Number: int(n), MemoryMiB: mem, MemoryPercent: int(pct), Cores: int(cores)}}
	a.Restartable = init && c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways
	return a, true, nil
}
