package procmap

import corev1 "k8s.io/api/core/v1"

// ContainerIDs maps the runtime IDs of a pod's containers (app, init and
// sidecar) to their names, from the pod's status. A container that has not
// started yet has no ID and is left out.
func ContainerIDs(pod *corev1.Pod) map[string]string {
	out := map[string]string{}
	for _, list := range [][]corev1.ContainerStatus{pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses} {
		for _, s := range list {
			if s.ContainerID != "" {
				out[TrimRuntime(s.ContainerID)] = s.Name
			}
			// A restarted container's previous instance may still be ending.
			if t := s.LastTerminationState.Terminated; t != nil && t.ContainerID != "" {
				out[TrimRuntime(t.ContainerID)] = s.Name
			}
		}
	}
	return out
}
