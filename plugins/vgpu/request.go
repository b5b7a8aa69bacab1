package vgpu

import (
	corev1 "k8s.io/api/core/v1"

	"github.com/volcano-vgpu/volcano-vgpu/api"
	"github.com/volcano-vgpu/volcano-vgpu/plugins/fromapi"
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
	return fromapi.Request(pod, a.Resources, placement.Defaults{Cores: a.DefaultCores, DevicePolicy: a.DevicePolicy, Topology: a.Topology})
}
