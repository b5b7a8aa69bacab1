// Package gpu reads what the device plugin needs from NVML: the GPUs, their
// pairwise links and their health events. It works on any nvml.Interface, so
// the real library (Open) and the test harness's simulated one (e2e/sim/nvmlsim)
// share every line of discovery code.
package gpu

import (
	"errors"
	"fmt"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/volcano-vgpu/volcano-vgpu/api"
	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/compute"
	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/memguard"
)

// Device is one physical GPU as NVML reports it.
type Device struct {
	Index     int
	UUID      string
	Model     string
	BusID     string // normalized, see NormalizeBusID
	MemoryMiB int64  // what tenants may use: NVML's total less what the driver reserves
	// ReservedMiB is what the driver keeps for itself (NVML memory v2); it is
	// never offered, so the caps of a GPU's tenants fit what the card has.
	ReservedMiB int64
	NUMA        int // -1 when NVML does not know
	// Failure says why NVML could not describe the GPU (empty: it could).
	// Such a GPU is listed with what is known of it (UUID, when NVML gave
	// it) and is offered as unhealthy, never left out silently.
	Failure string
}

// Topology holds the pairwise links between the GPUs of Devices(), indexed
// by position in that slice.
type Topology struct {
	NVLinks [][]int
	PCIe    [][]api.PCIeLevel
}

// Event is a health event of one GPU (UUID empty: all GPUs).
type Event struct {
	UUID string
	// XID is the Xid error code; ECC double-bit errors are reported as XID 48.
	XID uint64
}

// ErrGPULost is wrapped by Probe when NVML says the GPU is lost (fallen off
// the bus: every call for it fails until it is reset or the node rebooted).
var ErrGPULost = errors.New("GPU is lost")

// ErrProbe is wrapped by every error Probe returns.
var ErrProbe = errors.New("GPU did not answer NVML")

// ErrTimeout is returned by Events.Wait when no event arrived in time.
var ErrTimeout = errors.New("no GPU event before the timeout")

// Events delivers health events until closed.
type Events interface {
	Wait(timeoutMs uint32) (Event, error)
	Close()
}

// DeviceLib is the seam between the device plugin and NVML.
type DeviceLib interface {
	Devices() ([]Device, error)
	Topology(devs []Device) (Topology, error)
	// Events registers for the health events of devs; a GPU NVML cannot
	// register is left out (its probe tells its health).
	Events(devs []Device) (Events, error)
	// Probe asks NVML about one GPU (handle by UUID, memory, PCI, pending
	// row remapping); nil means it answers and needs no reset.
	Probe(uuid string) error
	// MIG reads the MIG mode of GPU uuid and, when it is on, its profiles,
	// placements and instances.
	MIG(uuid string) (MIG, error)
	Shutdown()
}

var _ DeviceLib = (*nvmlLib)(nil)

type nvmlLib struct {
	lib nvml.Interface
}

// ErrNVMLNotFound is returned by Open when libnvidia-ml cannot be loaded.
var ErrNVMLNotFound = errors.New("NVML not found")

// Open loads the node's libnvidia-ml.so.1. The library it returns also feeds
// the compute controller (ComputeSource); a simulated one (New) does not.
func Open() (DeviceLib, error) {
	l, err := New(nvml.New())
	if err != nil {
		return nil, err
	}
	return realLib{l.(*nvmlLib)}, nil
}

// realLib is the node's own NVML.
type realLib struct{ *nvmlLib }

// New initializes lib (real or mock) and wraps it.
func New(lib nvml.Interface) (DeviceLib, error) {
	switch ret := lib.Init(); ret {
	case nvml.SUCCESS:
	case nvml.ERROR_LIBRARY_NOT_FOUND:
		return nil, fmt.Errorf("%w: libnvidia-ml.so.1 could not be loaded: install the NVIDIA driver (and run the container with the NVIDIA runtime)", ErrNVMLNotFound)
	default:
		return nil, fmt.Errorf("NVML init: %v: check that the NVIDIA driver is loaded (nvidia-smi)", ret)
	}
	return &nvmlLib{lib: lib}, nil
}

func (l *nvmlLib) Shutdown() { _ = l.lib.Shutdown() }

// ComputeSource is the GPU-wide utilization the compute controller runs on.
func (l realLib) ComputeSource() compute.Source { return &compute.NVMLSource{Lib: l.lib} }

// MemorySource is what each process holds on each GPU, for the memory guard.
func (l realLib) MemorySource() memguard.Source { return &memguard.NVMLSource{Lib: l.lib} }

// Devices lists one Device per GPU NVML counts. A GPU NVML cannot describe
// is listed with its Failure (and its UUID when NVML gave it): one bad GPU
// never hides the others. Only a failing count is an error.
func (l *nvmlLib) Devices() ([]Device, error) {
	n, ret := l.lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("NVML device count: %v", ret)
	}
	devs := make([]Device, 0, n)
	for i := 0; i < n; i++ {
		devs = append(devs, l.device(i))
	}
	return devs, nil
}

func (l *nvmlLib) device(i int) Device {
	d := Device{Index: i, NUMA: -1}
	fail := func(what string, ret nvml.Return) Device {
		d.Failure = fmt.Sprintf("%s: %v", what, ret)
		return d
	}
	h, ret := l.lib.DeviceGetHandleByIndex(i)
	if ret != nvml.SUCCESS {
		return fail("handle", ret)
	}
	if d.UUID, ret = h.GetUUID(); ret != nvml.SUCCESS {
		d.UUID = ""
		return fail("UUID", ret)
	}
	if d.Model, ret = h.GetName(); ret != nvml.SUCCESS {
		d.Model = ""
		return fail("name", ret)
	}
	mem, ret := h.GetMemoryInfo()
	if ret != nvml.SUCCESS {
		return fail("memory info", ret)
	}
	d.MemoryMiB = int64(mem.Total >> 20)
	// Drivers with memory v2 say what they reserve (older ones: not supported).
	if m2, ret := h.GetMemoryInfo_v2(); ret == nvml.SUCCESS && m2.Reserved < m2.Total {
		d.ReservedMiB = int64((m2.Reserved + 1<<20 - 1) >> 20)
		d.MemoryMiB = int64(m2.Total>>20) - d.ReservedMiB
	}
	pci, ret := h.GetPciInfo()
	if ret != nvml.SUCCESS {
		d.MemoryMiB, d.ReservedMiB = 0, 0
		return fail("PCI info", ret)
	}
	d.BusID = NormalizeBusID(cString(pci.BusId[:]))
	if numa, ret := h.GetNumaNodeId(); ret == nvml.SUCCESS {
		d.NUMA = numa
	}
	return d
}

// Probe implements DeviceLib.
func (l *nvmlLib) Probe(uuid string) error {
	fail := func(what string, ret nvml.Return) error {
		if ret == nvml.ERROR_GPU_IS_LOST {
			return fmt.Errorf("%w: GPU %s: %s: %w (it fell off the bus: reset the GPU or reboot the node)", ErrProbe, uuid, what, ErrGPULost)
		}
		return fmt.Errorf("%w: GPU %s: %s: %v", ErrProbe, uuid, what, ret)
	}
	h, ret := l.lib.DeviceGetHandleByUUID(uuid)
	if ret != nvml.SUCCESS {
		return fail("handle", ret)
	}
	if _, ret := h.GetMemoryInfo(); ret != nvml.SUCCESS {
		return fail("memory info", ret)
	}
	if _, ret := h.GetPciInfo(); ret != nvml.SUCCESS {
		return fail("PCI info", ret)
	}
	// Ampere and later remap a row after an uncorrectable ECC error (Xid 48,
	// 63, 64); until the GPU is reset the remapping is pending.
	_, _, pending, failed, ret := h.GetRemappedRows()
	switch {
	case ret == nvml.ERROR_NOT_SUPPORTED:
	case ret != nvml.SUCCESS:
		return fail("remapped rows", ret)
	case failed:
		return fmt.Errorf("%w: GPU %s: row remapping failed (replace the GPU)", ErrProbe, uuid)
	case pending:
		return fmt.Errorf("%w: GPU %s: row remapping pending (reset the GPU: nvidia-smi -r)", ErrProbe, uuid)
	}
	return nil
}

// SetExclusive sets the compute mode of GPU uuid to EXCLUSIVE_PROCESS (only
// one process, the MPS server, may open a context) or back to DEFAULT.
func (l *nvmlLib) SetExclusive(uuid string, exclusive bool) error {
	mode, name := nvml.COMPUTEMODE_DEFAULT, "DEFAULT"
	if exclusive {
		mode, name = nvml.COMPUTEMODE_EXCLUSIVE_PROCESS, "EXCLUSIVE_PROCESS"
	}
	h, ret := l.lib.DeviceGetHandleByUUID(uuid)
	if ret != nvml.SUCCESS {
		return fmt.Errorf("GPU %s: handle: %v", uuid, ret)
	}
	if cur, ret := h.GetComputeMode(); ret == nvml.SUCCESS && cur == mode {
		return nil
	}
	switch ret := h.SetComputeMode(mode); ret {
	case nvml.SUCCESS:
		return nil
	case nvml.ERROR_NO_PERMISSION:
		return fmt.Errorf("GPU %s: setting compute mode %s: %v (the device plugin needs root on the host for it)", uuid, name, ret)
	default:
		return fmt.Errorf("GPU %s: setting compute mode %s: %v", uuid, name, ret)
	}
}

// handles returns the NVML handle of each device, nil for a device that
// failed discovery or whose handle NVML does not give now.
func (l *nvmlLib) handles(devs []Device) []nvml.Device {
	hs := make([]nvml.Device, len(devs))
	for i, d := range devs {
		if d.Failure != "" || d.UUID == "" {
			continue
		}
		if h, ret := l.lib.DeviceGetHandleByUUID(d.UUID); ret == nvml.SUCCESS {
			hs[i] = h
		}
	}
	return hs
}

// NormalizeBusID returns a PCI bus ID as domain(4):bus:device.function in
// lower case, so NVML's 8-digit domains compare equal to 4-digit ones.
func NormalizeBusID(id string) string {
	id = strings.ToLower(strings.TrimSpace(id))
	if dom, rest, ok := strings.Cut(id, ":"); ok && len(dom) > 4 && strings.Count(rest, ":") == 1 {
		id = dom[len(dom)-4:] + ":" + rest
	}
	return id
}

func cString(b []uint8) string {
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}
