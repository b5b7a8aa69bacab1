package plugin

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"

	"github.com/volcano-vgpu/volcano-vgpu/api"
	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/match"
)

// podEntry is what the plugin keeps of a pod bound to its node.
type podEntry struct {
	match      *match.Pod
	assignment api.Assignment // valid when match.Err == nil
	policy     api.ComputePolicy
	policyErr  error
	// users: the user each GPU container runs as, where the pod says
	// (runAsUser of the container, else of the pod).
	users map[string]int64
}

// toEntry converts a pod; ok is false for pods that request no vgpu-number.
func toEntry(pod *corev1.Pod, resource corev1.ResourceName, node string) (*podEntry, bool) {
	mp := &match.Pod{UID: string(pod.UID), Namespace: pod.Namespace, Name: pod.Name}
	users := map[string]int64{}
	add := func(c *corev1.Container, init bool) {
		n := requested(c, resource)
		if n <= 0 {
			return
		}
		restartable := init && c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways
		mp.Containers = append(mp.Containers, match.Container{Name: c.Name, Init: init, Restartable: restartable, Count: n})
		if uid := runAsUser(pod, c); uid != nil {
			users[c.Name] = *uid
		}
	}
	for i := range pod.Spec.InitContainers {
		add(&pod.Spec.InitContainers[i], true)
	}
	for i := range pod.Spec.Containers {
		add(&pod.Spec.Containers[i], false)
	}
	if len(mp.Containers) == 0 {
		return nil, false
	}
	e := &podEntry{match: mp, users: users}
	if v, ok := pod.Annotations[api.ComputePolicyKey]; ok {
		e.policy, e.policyErr = api.ParseComputePolicy(api.ComputePolicyKey, v)
	}
	value, ok := pod.Annotations[api.AssignmentKey]
	if !ok {
		mp.Err = fmt.Errorf("no %s annotation (was the pod scheduled by Volcano with the vgpu plugin?)", api.AssignmentKey)
		return e, true
	}
	a, err := api.DecodeAssignment(value)
	switch {
	case err != nil:
		mp.Err = err
	case a.PodUID != string(pod.UID):
		mp.Err = fmt.Errorf("%s: field podUID: expected this pod's UID %s, got %s (annotation copied from another pod?)", api.AssignmentKey, pod.UID, a.PodUID)
	case a.Node != node:
		mp.Err = fmt.Errorf("%s: field node: expected this node %s, got %s", api.AssignmentKey, node, a.Node)
	}
	if mp.Err != nil {
		return e, true
	}
	for i := range mp.Containers {
		c := &mp.Containers[i]
		ca, ok := a.Container(c.Name, c.Init)
		if !ok {
			mp.Err = fmt.Errorf("%s: expected an entry for %s container %q, which requests %d %s", api.AssignmentKey, kind(c.Init), c.Name, c.Count, resource)
			return e, true
		}
		if len(ca.Devices) != c.Count {
			mp.Err = fmt.Errorf("%s: container %q requests %d %s but is assigned %d GPUs", api.AssignmentKey, c.Name, c.Count, resource, len(ca.Devices))
			return e, true
		}
		c.Devices = ca.Devices
	}
	e.assignment = a
	return e, true
}

// runAsUser is the user c runs as where the pod says (nil: the image's).
func runAsUser(pod *corev1.Pod, c *corev1.Container) *int64 {
	if c.SecurityContext != nil && c.SecurityContext.RunAsUser != nil {
		return c.SecurityContext.RunAsUser
	}
	if pod.Spec.SecurityContext != nil {
		return pod.Spec.SecurityContext.RunAsUser
	}
	return nil
}

func kind(init bool) string {
	if init {
		return "init"
	}
	return "app"
}

// requested returns the container's vgpu-number (limits, else requests).
func requested(c *corev1.Container, resource corev1.ResourceName) int {
	if q, ok := c.Resources.Limits[resource]; ok {
		return int(q.Value())
	}
	if q, ok := c.Resources.Requests[resource]; ok {
		return int(q.Value())
	}
	return 0
}

func terminal(pod *corev1.Pod) bool {
	return pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed
}
