package vgpu

// The conversions between the contract (api: what the device plugin publishes
// and the scheduler writes) and the placement core's values live in package
// fromapi, shared with the kubectl plugin; these are the plugin's names for
// them.

import (
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/volcano-vgpu/volcano-vgpu/api"
	"github.com/volcano-vgpu/volcano-vgpu/plugins/fromapi"
	"github.com/volcano-vgpu/volcano-vgpu/plugins/placement"
)

func pcieLevel(l api.PCIeLevel) placement.PCIeLevel { return fromapi.PCIeLevel(l) }

// nodeFromInventory: see fromapi.Node.
func nodeFromInventory(node *corev1.Node) (*placement.Node, time.Time, error) {
	return fromapi.Node(node)
}

// toAssignment renders a placement as the pod annotation payload.
func toAssignment(p placement.Placement, podUID string) api.Assignment {
	return fromapi.Assignment(p, podUID)
}

// fromAssignment is the placement an assignment annotation records.
func fromAssignment(a api.Assignment) placement.Placement { return fromapi.Placement(a) }
