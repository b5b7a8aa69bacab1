// Package kubeletemu emulates the device-plugin side of kubelet for nodes
// that have no kubelet (kwok nodes in the local cluster), so the real
// device plugin can be driven end to end. One process serves many nodes;
// node N lives under <base>/N:
//
//	<base>/N/device-plugins/kubelet.sock   Registration API (v1beta1)
//	<base>/N/device-plugins/<plugin>.sock  the plugins' own sockets
//	<base>/N/pod-resources/kubelet.sock    PodResources API (v1)
//	<base>/N/records/<podUID>.json         what happened to each pod
//
// What it emulates, following kubelet's device manager (v1.34):
//   - Registration; a connection to each registered plugin; ListAndWatch,
//     with node status capacity (all devices) and allocatable (healthy
//     devices) of the resource patched on every change.
//   - Admission of each pod bound to the node, one pod at a time and, per
//     pod, init containers first then app containers, each in spec order;
//     the pod joins the pod manager (and so PodResources List) right before
//     its admission, as kubelet's HandlePodAdditions does.
//   - Device choice per container as devicesToAllocate does it: devices of
//     earlier non-restartable init containers of the pod are reused first;
//     then GetPreferredAllocation (when the plugin offers it) over the
//     available healthy devices with the reused ones as must-include, then
//     the rest from the available devices (in sorted order, where kubelet's
//     order is a set's).
//   - Allocate with one container per call; on error the pod is rejected:
//     its devices are released, the error is recorded and an Event with
//     reason UnexpectedAdmissionError ("Allocate failed due to …, which is
//     unexpected") is posted on the pod, and the pod is marked Failed with
//     that reason and message, as kubelet marks it.
//   - PreStartContainer for every container once the pod is admitted, when
//     the plugin asks for it; a failure is recorded with an Event (reason
//     Failed), as a failed container start would be.
//   - PodResources List/Get/GetAllocatableResources over the admitted pods
//     (app containers and restartable init containers, as kubelet lists).
//   - Release of a pod's devices when it is deleted or terminal, also when
//     that happens while its devices are being allocated: they are not
//     recorded then, where kubelet keeps only active pods' devices at its
//     next allocation (the pod is rejected; no one is left to see it).
//   - Kubelet restart: at start it deletes every socket in the
//     device-plugins directory, so plugins see kubelet.sock recreated; pods
//     recorded as admitted by an earlier run keep their devices (kubelet's
//     checkpoint) and are not allocated again.
//
// What it does not emulate: the topology, CPU and memory managers (no NUMA
// alignment), the pod status other than a rejection's (kwok owns it),
// container restarts (PreStart is called once per container),
// CDI devices, the 5-minute grace before a vanished plugin's devices turn
// unhealthy, and DRA. Where kubelet would fail a pod because the plugin is
// not registered (yet, or again after a restart), the emulator waits up to
// RegisterWait for the registration instead, which keeps e2e tests free of
// start-up races.
package kubeletemu
