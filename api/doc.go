// Package api is the contract between the parts of volcano-vgpu: the
// scheduler plugin, the device plugin and the in-container limiter.
//
// It is the only code that knows the resource names, the annotation keys and
// the versioned payloads written on nodes and pods. Everything it decodes is
// checked strictly: unknown versions, unknown fields and out-of-range values
// are errors that name the annotation key, the field and what was expected.
//
// Payloads:
//   - Inventory (node annotation InventoryKey): the node's GPUs, their pairwise
//     links and a heartbeat, published by the device plugin; a GPU in mode
//     mig carries its MIG profiles, their legal placements and its instances.
//   - Assignment (pod annotation AssignmentKey): per container, the GPUs and
//     the memory/cores share on each (on a MIG GPU: the profile and placement
//     of its instance), written by the scheduler after the gang commits and
//     read by the device plugin in Allocate.
//   - LimiterConfig (a binary file): the limits one container's libvcuda.so
//     enforces, written by the device plugin, mirrored in vcuda/include/vcuda_config.h.
package api
