package kubeletemu

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// rpcTimeout bounds each call to a plugin.
const rpcTimeout = time.Minute

// admit allocates a pod's devices the way kubelet's device manager does.
func (n *Node) admit(ctx context.Context, pod *corev1.Pod) {
	logger := klog.FromContext(ctx).WithValues("node", n.name, "pod", klog.KObj(pod))
	uid := string(pod.UID)
	n.mu.Lock()
	if n.released[uid] {
		n.mu.Unlock()
		return
	}
	n.pods[uid] = pod // joins the pod manager before its admission
	n.mu.Unlock()

	rec := &Record{PodUID: uid, Namespace: pod.Namespace, Name: pod.Name, Node: n.name}
	reuse := map[string][]string{}
	type step struct {
		c    *corev1.Container
		init bool
	}
	var steps []step
	for i := range pod.Spec.InitContainers {
		steps = append(steps, step{&pod.Spec.InitContainers[i], true})
	}
	for i := range pod.Spec.Containers {
		steps = append(steps, step{&pod.Spec.Containers[i], false})
	}
	for _, s := range steps {
		for _, res := range n.pluginResources(s.c) {
			q := s.c.Resources.Limits[corev1.ResourceName(res)]
			need := int(q.Value())
			cr, err := n.allocateContainer(ctx, pod, s.c, s.init, res, need, reuse[res])
			rec.Containers = append(rec.Containers, cr)
			if err != nil {
				n.reject(ctx, pod, rec, err)
				return
			}
			switch {
			case s.init && !restartable(s.c):
				reuse[res] = union(reuse[res], cr.DeviceIDs)
			default:
				reuse[res] = slices.DeleteFunc(reuse[res], func(id string) bool { return slices.Contains(cr.DeviceIDs, id) })
			}
		}
	}
	rec.Admitted, rec.Time = true, time.Now().UTC()
	if len(rec.Containers) == 0 {
		return // nothing of ours: no record
	}
	n.preStart(ctx, pod, rec)
	if err := n.writeRecord(rec); err != nil {
		logger.Error(err, "Writing the pod record")
	}
	logger.V(4).Info("Pod admitted", "containers", len(rec.Containers))
}

// pluginResources lists the container's requested resources that have a
// plugin, sorted.
func (n *Node) pluginResources(c *corev1.Container) []string {
	var out []string
	for name, q := range c.Resources.Limits {
		if q.Value() > 0 && (n.isPluginResource(string(name)) || n.expects(string(name))) {
			out = append(out, string(name))
		}
	}
	sort.Strings(out)
	return out
}

func (n *Node) allocateContainer(ctx context.Context, pod *corev1.Pod, c *corev1.Container, init bool, res string, need int, reusable []string) (ContainerRecord, error) {
	cr := ContainerRecord{Name: c.Name, Init: init, Resource: res}
	uid := string(pod.UID)
	n.mu.Lock()
	if prev := n.podDevices[uid][c.Name][res]; len(prev) > 0 { // restored from an earlier run
		cr.DeviceIDs = slices.Clone(prev)
		n.mu.Unlock()
		return cr, nil
	}
	n.mu.Unlock()
	ep, err := n.waitEndpoint(ctx, res)
	if err != nil {
		cr.AllocateError = err.Error()
		return cr, err
	}
	var allocated []string
	for _, id := range sorted(reusable) {
		if len(allocated) < need {
			allocated = append(allocated, id)
		}
	}
	cr.Reused = slices.Clone(allocated)
	if len(allocated) < need {
		n.mu.Lock()
		inUse := n.inUse(res)
		n.mu.Unlock()
		var available []string
		for _, id := range ep.healthy() {
			if !inUse[id] {
				available = append(available, id)
			}
		}
		if len(available) < need-len(allocated) {
			err := fmt.Errorf("requested number of devices unavailable for %s. Requested: %d, Available: %d", res, need, len(available))
			cr.AllocateError = err.Error()
			return cr, err
		}
		if ep.options.GetPreferredAllocationAvailable {
			req := &PreferredRequest{Available: union(available, allocated), MustInclude: slices.Clone(allocated), Size: need}
			cr.PreferredRequest = req
			pctx, cancel := context.WithTimeout(ctx, rpcTimeout)
			resp, err := ep.client.GetPreferredAllocation(pctx, &pluginapi.PreferredAllocationRequest{ContainerRequests: []*pluginapi.ContainerPreferredAllocationRequest{{
				AvailableDeviceIDs: req.Available, MustIncludeDeviceIDs: req.MustInclude, AllocationSize: int32(need),
			}}})
			cancel()
			if err != nil {
				cr.PreferredError = err.Error()
				cr.AllocateError = err.Error()
				return cr, err
			}
			if len(resp.ContainerResponses) > 0 {
				cr.Preferred = resp.ContainerResponses[0].DeviceIDs
				for _, id := range cr.Preferred {
					if len(allocated) < need && slices.Contains(available, id) && !slices.Contains(allocated, id) {
						allocated = append(allocated, id)
					}
				}
			}
		}
		for _, id := range available {
			if len(allocated) < need && !slices.Contains(allocated, id) {
				allocated = append(allocated, id)
			}
		}
	}
	cr.DeviceIDs = allocated
	actx, cancel := context.WithTimeout(ctx, rpcTimeout)
	resp, err := ep.client.Allocate(actx, &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: allocated}}})
	cancel()
	if err == nil && len(resp.ContainerResponses) == 0 {
		err = fmt.Errorf("no containers return in allocation response %v", resp)
	}
	if err != nil {
		cr.AllocateError = err.Error()
		return cr, err
	}
	cr.Response = fromProto(resp.ContainerResponses[0])
	if err := n.hold(uid, c.Name, res, allocated); err != nil {
		cr.AllocateError = err.Error()
		return cr, err
	}
	return cr, nil
}

// hold records a container's devices, unless the pod was deleted or ended
// while they were being allocated: its release has already run, so devices
// recorded now would be held for ever. Kubelet's device manager drops such
// devices at its next allocation (it keeps only active pods' devices).
func (n *Node) hold(uid, container, res string, ids []string) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.released[uid] {
		return fmt.Errorf("pod %s was deleted or ended during its admission; devices %v go back", uid, ids)
	}
	if n.podDevices[uid] == nil {
		n.podDevices[uid] = map[string]devices{}
	}
	if n.podDevices[uid][container] == nil {
		n.podDevices[uid][container] = devices{}
	}
	n.podDevices[uid][container][res] = slices.Clone(ids)
	return nil
}

// reject fails the pod's admission: its devices go back, an Event says why.
func (n *Node) reject(ctx context.Context, pod *corev1.Pod, rec *Record, err error) {
	uid := string(pod.UID)
	n.mu.Lock()
	delete(n.pods, uid)
	delete(n.podDevices, uid)
	n.mu.Unlock()
	msg := fmt.Sprintf("Allocate failed due to %v, which is unexpected", err)
	rec.Error, rec.Time = msg, time.Now().UTC()
	logger := klog.FromContext(ctx)
	logger.Info("Pod rejected", "node", n.name, "pod", klog.KObj(pod), "err", err)
	n.event(ctx, pod, admissionReason, msg)
	if werr := n.writeRecord(rec); werr != nil {
		logger.Error(werr, "Writing the pod record")
	}
	go n.failPod(context.WithoutCancel(ctx), pod, msg)
}

// preStart calls PreStartContainer for each allocated container, in order.
func (n *Node) preStart(ctx context.Context, pod *corev1.Pod, rec *Record) {
	for i := range rec.Containers {
		cr := &rec.Containers[i]
		n.mu.Lock()
		ep := n.endpoints[cr.Resource]
		n.mu.Unlock()
		if ep == nil || !ep.options.PreStartRequired {
			continue
		}
		ctx, cancel := context.WithTimeout(ctx, pluginapi.KubeletPreStartContainerRPCTimeoutInSecs*time.Second)
		_, err := ep.client.PreStartContainer(ctx, &pluginapi.PreStartContainerRequest{DevicesIds: cr.DeviceIDs})
		cancel()
		cr.PreStart = true
		if err != nil {
			cr.PreStartError = err.Error()
			n.event(ctx, pod, "Failed", fmt.Sprintf("Error: container %s: PreStartContainer of %s: %v", cr.Name, cr.Resource, err))
		}
	}
}

func (n *Node) event(ctx context.Context, pod *corev1.Pod, reason, msg string) {
	now := metav1.Now()
	ev := &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s.%x", pod.Name, time.Now().UnixNano()), Namespace: pod.Namespace},
		InvolvedObject: corev1.ObjectReference{
			Kind: "Pod", APIVersion: "v1", Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID, ResourceVersion: pod.ResourceVersion,
		},
		Reason: reason, Message: msg, Type: corev1.EventTypeWarning,
		Source:         corev1.EventSource{Component: "kubelet", Host: n.name},
		FirstTimestamp: now, LastTimestamp: now, Count: 1,
		ReportingController: "kubelet", ReportingInstance: n.name,
	}
	if _, err := n.client.CoreV1().Events(pod.Namespace).Create(context.WithoutCancel(ctx), ev, metav1.CreateOptions{}); err != nil {
		klog.FromContext(ctx).Error(err, "Posting an event", "pod", klog.KObj(pod), "reason", reason)
	}
}

func union(a, b []string) []string {
	out := slices.Clone(a)
	for _, x := range b {
		if !slices.Contains(out, x) {
			out = append(out, x)
		}
	}
	return out
}

func sorted(s []string) []string {
	out := slices.Clone(s)
	sort.Strings(out)
	return out
}
