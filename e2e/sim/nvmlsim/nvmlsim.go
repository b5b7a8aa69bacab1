// Package nvmlsim builds a simulated NVML (go-nvml's mock) from one node of
// a simulated-cluster file (e2e/sim/clusters): deterministic UUIDs and PCI
// bus IDs, memory, NUMA nodes, PCIe common ancestors and NVLinks (direct pairs
// or through NVSwitches), and an event set into which tests and the local
// cluster inject Xid errors, and MIG (mig.go): MIG mode per GPU, NVIDIA's
// published GPU instance profiles and placements, GPU and compute
// instances and their MIG devices.
//
// Every mock method the device plugin calls is filled in; any other method
// panics, as go-nvml's mock does.
package nvmlsim

import (
	"fmt"
	"sync"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"

	"github.com/volcano-vgpu/volcano-vgpu/e2e/sim/simconfig"
)

// switchCount is the number of NVSwitches on a simulated NVSwitch board; a
// GPU's links are spread over them round-robin, as on a DGX A100.
const switchCount = 6

// Sim is a simulated NVML for one node.
type Sim struct {
	*mock.Interface
	node    simconfig.Node
	devices []*mock.Device

	mu   sync.Mutex
	sets []*eventSet
	// per GPU (by position): lost answers ERROR_GPU_IS_LOST to every call,
	// remapPending reports a row remapping that waits for a GPU reset
	lost, remapPending []bool
	// computeMode of each GPU (DEFAULT at start)
	computeMode []nvml.ComputeMode
	// waitErr, when not SUCCESS, is what every event set's Wait returns
	waitErr nvml.Return
	// mig of each GPU (mig.go); nil for a model with no MIG table
	mig []*migGPU
	// migFile, when set, keeps the MIG state across restarts (migstate.go)
	migFile string
}

var _ nvml.Interface = (*Sim)(nil)

// New builds the simulated NVML of node.
func New(node simconfig.Node) *Sim {
	s := &Sim{node: node, lost: make([]bool, len(node.GPUs)), remapPending: make([]bool, len(node.GPUs)), waitErr: nvml.SUCCESS,
		computeMode: make([]nvml.ComputeMode, len(node.GPUs))}
	for i := range node.GPUs {
		s.mig = append(s.mig, s.newMIG(i))
		s.devices = append(s.devices, s.newDevice(i))
	}
	s.Interface = &mock.Interface{
		InitFunc:                   func() nvml.Return { return nvml.SUCCESS },
		ShutdownFunc:               func() nvml.Return { return nvml.SUCCESS },
		SystemGetDriverVersionFunc: func() (string, nvml.Return) { return "550.54.15-sim", nvml.SUCCESS },
		DeviceGetCountFunc:         func() (int, nvml.Return) { return len(s.devices), nvml.SUCCESS },
		DeviceGetHandleByIndexFunc: func(i int) (nvml.Device, nvml.Return) {
			if i < 0 || i >= len(s.devices) {
				return nil, nvml.ERROR_INVALID_ARGUMENT
			}
			if s.isLost(i) {
				return nil, nvml.ERROR_GPU_IS_LOST
			}
			return s.devices[i], nvml.SUCCESS
		},
		DeviceGetHandleByUUIDFunc: func(uuid string) (nvml.Device, nvml.Return) {
			if i := s.index(uuid); i >= 0 {
				if s.isLost(i) {
					return nil, nvml.ERROR_GPU_IS_LOST
				}
				return s.devices[i], nvml.SUCCESS
			}
			return nil, nvml.ERROR_NOT_FOUND
		},
		EventSetCreateFunc: s.newEventSet,
	}
	return s
}

// Node returns the simulated node.
func (s *Sim) Node() simconfig.Node { return s.node }

func (s *Sim) index(uuid string) int {
	for i, g := range s.node.GPUs {
		if g.UUID == uuid {
			return i
		}
	}
	return -1
}

func (s *Sim) newDevice(i int) *mock.Device {
	g := s.node.GPUs[i]
	d := &mock.Device{}
	d.GetIndexFunc = func() (int, nvml.Return) {
		if s.isLost(i) {
			return 0, nvml.ERROR_GPU_IS_LOST
		}
		return g.Index, nvml.SUCCESS
	}
	d.GetMinorNumberFunc = func() (int, nvml.Return) {
		if s.isLost(i) {
			return 0, nvml.ERROR_GPU_IS_LOST
		}
		return g.Index, nvml.SUCCESS
	}
	d.GetUUIDFunc = func() (string, nvml.Return) {
		if s.isLost(i) {
			return "", nvml.ERROR_GPU_IS_LOST
		}
		return g.UUID, nvml.SUCCESS
	}
	d.GetNameFunc = func() (string, nvml.Return) {
		if s.isLost(i) {
			return "", nvml.ERROR_GPU_IS_LOST
		}
		return g.Model, nvml.SUCCESS
	}
	d.GetMemoryInfoFunc = func() (nvml.Memory, nvml.Return) {
		if s.isLost(i) {
			return nvml.Memory{}, nvml.ERROR_GPU_IS_LOST
		}
		total := uint64(g.MemoryMiB) << 20
		return nvml.Memory{Total: total, Free: total}, nvml.SUCCESS
	}
	// as recent drivers: total = reserved + free + used
	d.GetMemoryInfo_v2Func = func() (nvml.Memory_v2, nvml.Return) {
		if s.isLost(i) {
			return nvml.Memory_v2{}, nvml.ERROR_GPU_IS_LOST
		}
		total, reserved := uint64(g.MemoryMiB)<<20, uint64(g.ReservedMiB)<<20
		return nvml.Memory_v2{Version: 2, Total: total, Reserved: reserved, Free: total - reserved}, nvml.SUCCESS
	}
	d.GetPciInfoFunc = func() (nvml.PciInfo, nvml.Return) {
		if s.isLost(i) {
			return nvml.PciInfo{}, nvml.ERROR_GPU_IS_LOST
		}
		return pciInfo(g.BusID), nvml.SUCCESS
	}
	d.GetNumaNodeIdFunc = func() (int, nvml.Return) {
		if s.isLost(i) {
			return 0, nvml.ERROR_GPU_IS_LOST
		}
		return g.NUMA, nvml.SUCCESS
	}
	d.GetTopologyCommonAncestorFunc = func(other nvml.Device) (nvml.GpuTopologyLevel, nvml.Return) {
		if s.isLost(i) {
			return 0, nvml.ERROR_GPU_IS_LOST
		}
		j := s.deviceIndex(other)
		if j < 0 {
			return 0, nvml.ERROR_INVALID_ARGUMENT
		}
		return s.commonAncestor(i, j), nvml.SUCCESS
	}
	d.GetNvLinkStateFunc = func(link int) (nvml.EnableState, nvml.Return) {
		if s.isLost(i) {
			return nvml.FEATURE_DISABLED, nvml.ERROR_GPU_IS_LOST
		}
		if _, _, ret := s.nvlinkRemote(i, link); ret != nvml.SUCCESS {
			return nvml.FEATURE_DISABLED, ret
		}
		return nvml.FEATURE_ENABLED, nvml.SUCCESS
	}
	d.GetNvLinkRemotePciInfoFunc = func(link int) (nvml.PciInfo, nvml.Return) {
		if s.isLost(i) {
			return nvml.PciInfo{}, nvml.ERROR_GPU_IS_LOST
		}
		bus, _, ret := s.nvlinkRemote(i, link)
		return pciInfo(bus), ret
	}
	d.GetNvLinkRemoteDeviceTypeFunc = func(link int) (nvml.IntNvLinkDeviceType, nvml.Return) {
		if s.isLost(i) {
			return 0, nvml.ERROR_GPU_IS_LOST
		}
		_, typ, ret := s.nvlinkRemote(i, link)
		return typ, ret
	}
	d.GetSupportedEventTypesFunc = func() (uint64, nvml.Return) {
		if s.isLost(i) {
			return 0, nvml.ERROR_GPU_IS_LOST
		}
		return nvml.EventTypeXidCriticalError | nvml.EventTypeDoubleBitEccError | nvml.EventTypeSingleBitEccError, nvml.SUCCESS
	}
	d.RegisterEventsFunc = func(types uint64, set nvml.EventSet) nvml.Return {
		if s.isLost(i) {
			return nvml.ERROR_GPU_IS_LOST
		}
		es, ok := set.(*eventSet)
		if !ok {
			return nvml.ERROR_INVALID_ARGUMENT
		}
		es.register(d, types)
		return nvml.SUCCESS
	}
	d.GetComputeModeFunc = func() (nvml.ComputeMode, nvml.Return) {
		if s.isLost(i) {
			return 0, nvml.ERROR_GPU_IS_LOST
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.computeMode[i], nvml.SUCCESS
	}
	d.SetComputeModeFunc = func(m nvml.ComputeMode) nvml.Return {
		switch {
		case s.isLost(i):
			return nvml.ERROR_GPU_IS_LOST
		case m != nvml.COMPUTEMODE_DEFAULT && m != nvml.COMPUTEMODE_EXCLUSIVE_PROCESS && m != nvml.COMPUTEMODE_PROHIBITED:
			return nvml.ERROR_INVALID_ARGUMENT
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		s.computeMode[i] = m
		return nvml.SUCCESS
	}
	// No row remapping failure is simulated; a pending one is (InjectRemapPending).
	d.GetRemappedRowsFunc = func() (int, int, bool, bool, nvml.Return) {
		if s.isLost(i) {
			return 0, 0, false, false, nvml.ERROR_GPU_IS_LOST
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		return 0, 0, s.remapPending[i], false, nvml.SUCCESS
	}
	s.addMIG(i, d)
	return d
}

// ComputeMode is the compute mode of GPU uuid (DEFAULT for an unknown one).
func (s *Sim) ComputeMode(uuid string) nvml.ComputeMode {
	i := s.index(uuid)
	if i < 0 {
		return nvml.COMPUTEMODE_DEFAULT
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.computeMode[i]
}

func (s *Sim) deviceIndex(d nvml.Device) int {
	for i, x := range s.devices {
		if nvml.Device(x) == d {
			return i
		}
	}
	return -1
}

// commonAncestor models a board where GPUs 2k and 2k+1 share a PCIe switch,
// GPUs of one NUMA node share a CPU socket, and sockets talk over SMP.
func (s *Sim) commonAncestor(i, j int) nvml.GpuTopologyLevel {
	a, b := s.node.GPUs[i], s.node.GPUs[j]
	switch {
	case a.NUMA != b.NUMA:
		return nvml.TOPOLOGY_SYSTEM
	case i/2 == j/2:
		return nvml.TOPOLOGY_SINGLE
	default:
		return nvml.TOPOLOGY_NODE
	}
}

// nvlinkRemote returns the far end of link on GPU i: the partner GPU's bus ID
// for NVLink pairs, an NVSwitch's for NVSwitch boards; ERROR_NOT_SUPPORTED
// when the node has no NVLink, ERROR_INVALID_ARGUMENT past the last link.
func (s *Sim) nvlinkRemote(i, link int) (string, nvml.IntNvLinkDeviceType, nvml.Return) {
	n := s.node
	if n.Topology == simconfig.TopologyPCIe || n.NVLinks == 0 {
		return "", 0, nvml.ERROR_NOT_SUPPORTED
	}
	if link < 0 || link >= n.NVLinks || link >= nvml.NVLINK_MAX_LINKS {
		return "", 0, nvml.ERROR_INVALID_ARGUMENT
	}
	switch n.Topology {
	case simconfig.TopologyNVSwitch:
		return fmt.Sprintf("00000001:%02X:00.0", 0xc0+link%switchCount), nvml.NVLINK_DEVICE_TYPE_SWITCH, nvml.SUCCESS
	case simconfig.TopologyPairs:
		partner := i ^ 1
		if partner >= len(n.GPUs) {
			return "", 0, nvml.ERROR_INVALID_ARGUMENT // odd GPU out has no bridge
		}
		return n.GPUs[partner].BusID, nvml.NVLINK_DEVICE_TYPE_GPU, nvml.SUCCESS
	}
	return "", 0, nvml.ERROR_NOT_SUPPORTED
}

func pciInfo(busID string) nvml.PciInfo {
	var p nvml.PciInfo
	copy(p.BusId[:len(p.BusId)-1], busID)
	legacy := busID
	if len(legacy) > 12 {
		legacy = legacy[len(legacy)-12:]
	}
	copy(p.BusIdLegacy[:len(p.BusIdLegacy)-1], legacy)
	p.PciDeviceId = 0x20B010DE
	return p
}
