package gpu

import (
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/volcano-vgpu/volcano-vgpu/api"
)

var pcieLevels = map[nvml.GpuTopologyLevel]api.PCIeLevel{
	nvml.TOPOLOGY_INTERNAL:   api.PCIeInternal,
	nvml.TOPOLOGY_SINGLE:     api.PCIeSingle,
	nvml.TOPOLOGY_MULTIPLE:   api.PCIeMultiple,
	nvml.TOPOLOGY_HOSTBRIDGE: api.PCIeHostBridge,
	nvml.TOPOLOGY_NODE:       api.PCIeNode,
	nvml.TOPOLOGY_SYSTEM:     api.PCIeSystem,
}

// Topology measures the link matrix: PCIe distance from the common ancestor
// of each pair, NVLink counts from each active link's remote end. Links to
// an NVSwitch connect a GPU to every other GPU on the switch fabric, so two
// GPUs that both reach the fabric get min(their switch links) NVLinks. A GPU
// NVML cannot reach has no NVLinks and the farthest PCIe level.
func (l *nvmlLib) Topology(devs []Device) (Topology, error) {
	hs := l.handles(devs)
	n := len(devs)
	t := Topology{NVLinks: square[int](n), PCIe: square[api.PCIeLevel](n)}
	for i := range n {
		for j := i + 1; j < n; j++ {
			if hs[i] == nil || hs[j] == nil { // a GPU NVML cannot reach: as far as can be
				t.PCIe[i][j], t.PCIe[j][i] = api.PCIeSystem, api.PCIeSystem
				continue
			}
			lvl, ret := hs[i].GetTopologyCommonAncestor(hs[j])
			if ret != nvml.SUCCESS {
				return Topology{}, fmt.Errorf("PCIe common ancestor of GPUs %d and %d: %v", devs[i].Index, devs[j].Index, ret)
			}
			p, ok := pcieLevels[lvl]
			if !ok {
				p = api.PCIeSystem
			}
			t.PCIe[i][j], t.PCIe[j][i] = p, p
		}
	}
	byBus := make(map[string]int, n)
	for i, d := range devs {
		byBus[d.BusID] = i
	}
	direct := square[int](n)
	switchLinks := make([]int, n)
	for i, h := range hs {
		if h == nil {
			continue // no links counted for a GPU NVML cannot reach
		}
		if err := countLinks(h, i, byBus, direct, switchLinks); err != nil {
			return Topology{}, fmt.Errorf("NVLinks of GPU %d: %w", devs[i].Index, err)
		}
	}
	for i := range n {
		for j := range n {
			if i == j {
				continue
			}
			c := min(direct[i][j], direct[j][i]) + min(switchLinks[i], switchLinks[j])
			t.NVLinks[i][j] = min(c, 64)
		}
	}
	return t, nil
}

// countLinks walks the NVLinks of GPU i until NVML says there are no more.
func countLinks(h nvml.Device, i int, byBus map[string]int, direct [][]int, switchLinks []int) error {
	for link := 0; link < nvml.NVLINK_MAX_LINKS; link++ {
		state, ret := h.GetNvLinkState(link)
		switch ret {
		case nvml.SUCCESS:
		case nvml.ERROR_NOT_SUPPORTED, nvml.ERROR_INVALID_ARGUMENT:
			return nil // no NVLink, or past the last link
		default:
			return fmt.Errorf("link %d state: %v", link, ret)
		}
		if state != nvml.FEATURE_ENABLED {
			continue
		}
		pci, ret := h.GetNvLinkRemotePciInfo(link)
		if ret != nvml.SUCCESS {
			return fmt.Errorf("link %d remote PCI info: %v", link, ret)
		}
		remote := NormalizeBusID(cString(pci.BusId[:]))
		if j, ok := byBus[remote]; ok && j != i {
			direct[i][j]++
			continue
		}
		// Not a GPU of this node: an NVSwitch, unless NVML says otherwise
		// (older drivers do not know the remote type).
		typ, ret := h.GetNvLinkRemoteDeviceType(link)
		if ret != nvml.SUCCESS || typ == nvml.NVLINK_DEVICE_TYPE_SWITCH {
			switchLinks[i]++
		}
	}
	return nil
}

func square[T any](n int) [][]T {
	m := make([][]T, n)
	for i := range m {
		m[i] = make([]T, n)
	}
	return m
}
