package vgpu

import (
	corev1 "k8s.io/api/core/v1"

	"github.com/volcano-vgpu/volcano-vgpu/api"
	"github.com/volcano-vgpu/volcano-vgpu/plugins/placement"
	"github.com/volcano-vgpu/volcano-vgpu/podrequest"
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
	asks, _, err := podrequest.Parse(pod, a.Resources)
	if err != nil || len(asks) == 0 {
		return nil, api.PodOptions{}, err
	}
	req := &placement.Request{Containers: make([]placement.Container, 0, len(asks))}
	for _, c := range asks {
		req.Containers = append(req.Containers, placement.Container{
			Name: c.Name, Init: c.Init, Restartable: c.Restartable, Number: c.Number,
			MemoryMiB: c.MemoryMiB, MemoryPercent: c.MemoryPercent, Cores: c.Cores,
		})
	}
	opts, err := api.ParsePodOptions(pod.Annotations)
	if err != nil {
		return nil, api.PodOptions{}, err
	}
	req.TypeInclude, req.TypeExclude = opts.TypeInclude, opts.TypeExclude
	req.UUIDInclude, req.UUIDExclude = opts.UUIDInclude, opts.UUIDExclude
	req.Topology, req.DevicePolicy = opts.Topology, opts.DevicePolicy
	req.Mode, req.SpreadGroup = opts.Mode, opts.SpreadGroup
	if err := req.Normalize(placement.Defaults{Cores: a.DefaultCores, DevicePolicy: a.DevicePolicy, Topology: a.Topology}); err != nil {
		return nil, api.PodOptions{}, err
	}
	return req, opts, nil
}
