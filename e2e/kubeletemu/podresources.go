package kubeletemu

import (
	"context"
	"fmt"
	"sort"

	corev1 "k8s.io/api/core/v1"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// podResources is the node's PodResources service.
type podResources struct {
	podresourcesv1.UnimplementedPodResourcesListerServer
	node *Node
}

var _ podresourcesv1.PodResourcesListerServer = (*podResources)(nil)

func (s *podResources) List(context.Context, *podresourcesv1.ListPodResourcesRequest) (*podresourcesv1.ListPodResourcesResponse, error) {
	n := s.node
	if err := n.podResourcesDown(); err != nil {
		return nil, err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	resp := &podresourcesv1.ListPodResourcesResponse{}
	uids := make([]string, 0, len(n.pods))
	for uid := range n.pods {
		uids = append(uids, uid)
	}
	sort.Strings(uids)
	for _, uid := range uids {
		resp.PodResources = append(resp.PodResources, n.podResourcesLocked(n.pods[uid]))
	}
	return resp, nil
}

func (s *podResources) Get(_ context.Context, req *podresourcesv1.GetPodResourcesRequest) (*podresourcesv1.GetPodResourcesResponse, error) {
	n := s.node
	if err := n.podResourcesDown(); err != nil {
		return nil, err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, p := range n.pods {
		if p.Namespace == req.PodNamespace && p.Name == req.PodName {
			return &podresourcesv1.GetPodResourcesResponse{PodResources: n.podResourcesLocked(p)}, nil
		}
	}
	return nil, fmt.Errorf("pod %s in namespace %s not found", req.PodName, req.PodNamespace)
}

func (s *podResources) GetAllocatableResources(context.Context, *podresourcesv1.AllocatableResourcesRequest) (*podresourcesv1.AllocatableResourcesResponse, error) {
	resp := &podresourcesv1.AllocatableResourcesResponse{}
	for _, r := range s.node.Resources() {
		resp.Devices = append(resp.Devices, &podresourcesv1.ContainerDevices{ResourceName: r, DeviceIds: s.node.Healthy(r)})
	}
	return resp, nil
}

// podResourcesLocked lists app containers and restartable init containers,
// as kubelet does.
func (n *Node) podResourcesLocked(pod *corev1.Pod) *podresourcesv1.PodResources {
	pr := &podresourcesv1.PodResources{Name: pod.Name, Namespace: pod.Namespace}
	add := func(c *corev1.Container) {
		cr := &podresourcesv1.ContainerResources{Name: c.Name}
		devs := n.podDevices[string(pod.UID)][c.Name]
		res := make([]string, 0, len(devs))
		for r := range devs {
			res = append(res, r)
		}
		sort.Strings(res)
		for _, r := range res {
			cr.Devices = append(cr.Devices, &podresourcesv1.ContainerDevices{ResourceName: r, DeviceIds: devs[r]})
		}
		pr.Containers = append(pr.Containers, cr)
	}
	for i := range pod.Spec.InitContainers {
		if c := &pod.Spec.InitContainers[i]; restartable(c) {
			add(c)
		}
	}
	for i := range pod.Spec.Containers {
		add(&pod.Spec.Containers[i])
	}
	return pr
}

func restartable(c *corev1.Container) bool {
	return c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways
}
