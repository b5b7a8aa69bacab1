package api

import (
	"fmt"
	"strings"
)

// Version is the format version of every JSON payload in this package.
const Version = "v1"

// Default extended resource names. They are Volcano's deviceshare names, so
// Job specs written for Volcano's vGPU support run unchanged.
const (
	DefaultResourceNumber           = "volcano.sh/vgpu-number"
	DefaultResourceMemory           = "volcano.sh/vgpu-memory"
	DefaultResourceMemoryPercentage = "volcano.sh/vgpu-memory-percentage"
	DefaultResourceCores            = "volcano.sh/vgpu-cores"
)

// Prefix is the prefix of every annotation key this project owns.
const Prefix = "volcano-vgpu.io/"

// Node annotations.
const (
	// InventoryKey holds the JSON Inventory published by the device plugin.
	InventoryKey = Prefix + "inventory"
	// ComputePolicyNodeKey sets the default compute policy for a node's pods.
	ComputePolicyNodeKey = Prefix + "compute-policy"
)

// Pod annotations.
const (
	// AssignmentKey holds the JSON Assignment written by the scheduler.
	AssignmentKey = Prefix + "assignment"
	// RequestsKey holds the JSON Requests written by the admission webhook:
	// the per-GPU asks behind the totals the pod's resources carry.
	RequestsKey = Prefix + "requests"
	// GPUTypeIncludeKey / GPUTypeExcludeKey: comma-separated model substrings.
	GPUTypeIncludeKey = Prefix + "gpu-type-include"
	GPUTypeExcludeKey = Prefix + "gpu-type-exclude"
	// GPUUUIDIncludeKey / GPUUUIDExcludeKey: comma-separated GPU UUIDs.
	GPUUUIDIncludeKey = Prefix + "gpu-uuid-include"
	GPUUUIDExcludeKey = Prefix + "gpu-uuid-exclude"
	// TopologyKey: prefer (default), required or none.
	TopologyKey = Prefix + "topology"
	// DevicePolicyKey / NodePolicyKey: binpack or spread, overriding the
	// scheduler's arguments for one pod.
	DevicePolicyKey = Prefix + "device-policy"
	NodePolicyKey   = Prefix + "node-policy"
	// ComputePolicyKey: fixed, balance or none (limiter behaviour).
	ComputePolicyKey = Prefix + "compute-policy"
	// MIGProfileKey: the MIG profile each GPU container gets (1g.10gb),
	// instead of the smallest profile that holds its memory; the pod is a
	// MIG ask (volcano.sh/vgpu-mode: mig, or no mode).
	MIGProfileKey = Prefix + "mig-profile"

	// DeviceShareTypeIncludeKey / DeviceShareTypeExcludeKey are Volcano
	// deviceshare's model filters, honoured so its Job specs behave the same:
	// comma-separated model substrings; the exclude list is ignored when the
	// include list is set (deviceshare's rule).
	DeviceShareTypeIncludeKey = "nvidia.com/use-gputype"
	DeviceShareTypeExcludeKey = "nvidia.com/nouse-gputype"
)

// ResourceNames are the extended resource names in use; configurable so a
// cluster can run beside another vGPU stack.
type ResourceNames struct {
	Number           string `json:"number"`
	Memory           string `json:"memory"`
	MemoryPercentage string `json:"memoryPercentage"`
	Cores            string `json:"cores"`
}

// DefaultResourceNames returns Volcano's names.
func DefaultResourceNames() ResourceNames {
	return ResourceNames{
		Number:           DefaultResourceNumber,
		Memory:           DefaultResourceMemory,
		MemoryPercentage: DefaultResourceMemoryPercentage,
		Cores:            DefaultResourceCores,
	}
}

// Validate checks that every name is set and that no two are equal.
func (r ResourceNames) Validate() error {
	seen := map[string]string{}
	for _, f := range []struct{ field, name string }{
		{"number", r.Number}, {"memory", r.Memory},
		{"memoryPercentage", r.MemoryPercentage}, {"cores", r.Cores},
	} {
		if f.name == "" {
			return fmt.Errorf("resource name %q: expected a non-empty extended resource name such as %q", f.field, DefaultResourceNumber)
		}
		if !strings.Contains(f.name, "/") {
			return fmt.Errorf("resource name %q = %q: expected a domain-prefixed extended resource name (example.com/name)", f.field, f.name)
		}
		if other, dup := seen[f.name]; dup {
			return fmt.Errorf("resource names %q and %q are both %q: expected distinct names", other, f.field, f.name)
		}
		seen[f.name] = f.field
	}
	return nil
}

// Volcano deviceshare's pod annotations start with this prefix
// (volcano.sh/vgpu-type, volcano.sh/vgpu-ids-new, …).
const DeviceSharePrefix = "volcano.sh/vgpu-"

// AdmissionOptOutLabel set to AdmissionOptOutValue on a namespace or a pod
// keeps the pod away from the admission webhook (its vGPU asks then stay per
// GPU in queues, and a malformed ask is refused only by the scheduler).
const (
	AdmissionOptOutLabel = Prefix + "admission"
	AdmissionOptOutValue = "disabled"
)
