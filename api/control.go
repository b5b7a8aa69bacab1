package api

import (
	"encoding/binary"
	"fmt"
	"math"
	"sync/atomic"
	"unsafe"
)

// The node controller's files, mirrored from vcuda/include/vcuda_control.h
// (checked byte for byte by control_test.go):
//
//	vcuda.control  written only by the device plugin, mounted read-only beside
//	               the limiter config: the launch allowance per device and a
//	               heartbeat (seqlock).
//	vcuda.usage    in the container's shared dir, written by libvcuda.so: cost
//	               units launched and launches that waited, per device. An
//	               untrusted report.
const (
	ControlFile           = "vcuda.control"
	LimiterControlPath    = "/etc/vcuda/" + ControlFile
	UsageFile             = "vcuda.usage"
	ControlMagic          = 0x4C544356 // "VCTL"
	ControlVersion        = 2
	ControlVersionV1      = 1          // before the costs: ControlFileSizeV1 bytes
	UsageMagic            = 0x47535556 // "VUSG"
	UsageVersion          = 1
	ControlStalePeriods   = 5
	controlHeaderSize     = 64
	controlDeviceSize     = 64
	ControlFileSizeV1     = controlHeaderSize + controlDeviceSize*LimiterConfigMaxDevices
	ControlFileSize       = controlOffCosts + 8*LimiterConfigMaxDevices
	UsageFileSize         = ControlFileSizeV1
	controlOffCosts       = ControlFileSizeV1 // the devices' costs, after the entries
	controlOffAllowance   = 8
	controlOffRate        = 16
	controlOffFallback    = 24
	controlOffStamp       = 32
	controlOffMode        = 40
	controlOffPeriod      = 44
	controlOffSlotPeriod  = 48
	controlOffSlotStart   = 52
	controlOffSlotLen     = 56
	controlOffSlotFlags   = 60
	usageOffWaits         = 8
	controlOffDeviceCount = 12
)

// ControlMode is what the node tells the limiter to do with one device.
type ControlMode uint32

// Control modes (enum vcuda_control_mode).
const (
	ControlNone      ControlMode = 0 // no decision yet: the limiter decides locally
	ControlLimited   ControlMode = 1 // admit launches within the allowance
	ControlUnlimited ControlMode = 2 // admit everything
)

// ControlDevice is the node's decision for one device of a container.
type ControlDevice struct {
	Allowance uint64  // cumulative cost units the container may have launched at StampNs
	Rate      float64 // cost units per ns from StampNs on
	Fallback  float64 // cost units per ns to hold if the node stops answering
	StampNs   uint64  // CLOCK_MONOTONIC of the node
	Mode      ControlMode
	PeriodUs  uint32
	// Slot, where several held-back tenants share the GPU: the limiter
	// takes a slot period's credit at the slot's start, and a launch beyond
	// it waits for the next start (zero: no slot).
	Slot Slot
	// Cost: the node's estimate of the GPU time (ns) one cost unit of the
	// container's launches takes (0: none yet). In a confining slot the
	// limiter keeps no more of its work queued than the slot has left
	// (vcuda_control.h).
	Cost float64
}

// Slot is a tenant's part of every PeriodUs of CLOCK_MONOTONIC, from
// StartUs for LenUs (microseconds). The limiter reads the start; with
// Confine it also launches only within the slot (a launch after its end
// waits for the next start), where without, the length is only the node's
// plan (the target's part of the period).
type Slot struct {
	PeriodUs, StartUs, LenUs uint32
	Confine                  bool
}

// slotConfine is Slot.Confine's bit in the slot flags word.
const slotConfine = 1

// UsageDevice is a container's report for one device.
type UsageDevice struct {
	Launched uint64 // cost units of every admitted launch
	Waits    uint64 // launches that waited for allowance
}

// NewControl is an empty control file for n devices: no decision yet.
func NewControl(n int) ([]byte, error) {
	return newFile("control file", ControlFileSize, ControlMagic, ControlVersion, n)
}

// NewUsage is an empty usage report for n devices (libvcuda creates the
// real ones; tests forge them).
func NewUsage(n int) ([]byte, error) {
	return newFile("usage report", UsageFileSize, UsageMagic, UsageVersion, n)
}

func newFile(what string, size int, magic, version uint32, n int) ([]byte, error) {
	if n < 1 || n > LimiterConfigMaxDevices {
		return nil, fmt.Errorf("%s: %d devices, want 1..%d", what, n, LimiterConfigMaxDevices)
	}
	b := make([]byte, size)
	binary.LittleEndian.PutUint32(b[0:], magic)
	binary.LittleEndian.PutUint32(b[4:], version)
	binary.LittleEndian.PutUint32(b[8:], uint32(size))
	binary.LittleEndian.PutUint32(b[controlOffDeviceCount:], uint32(n))
	return b, nil
}

// CheckControl validates a control file's header for n devices: the current
// version, or version 1 (before the costs, ControlFileSizeV1 bytes), which the
// device plugin keeps writing for containers started before the costs and
// libvcuda reads without them (docs/install.md, "Upgrades and version skew").
func CheckControl(b []byte, n int) error {
	if len(b) == ControlFileSizeV1 {
		return checkHeader("control file", b, ControlMagic, ControlVersionV1, ControlFileSizeV1, n)
	}
	return checkHeader("control file", b, ControlMagic, ControlVersion, ControlFileSize, n)
}

// CheckUsage validates a usage report's header for n devices.
func CheckUsage(b []byte, n int) error {
	return checkHeader("usage report", b, UsageMagic, UsageVersion, UsageFileSize, n)
}

func checkHeader(what string, b []byte, magic, version uint32, size, n int) error {
	if len(b) != size {
		return fmt.Errorf("%s: %d bytes, want %d", what, len(b), size)
	}
	le := binary.LittleEndian
	if m := le.Uint32(b[0:]); m != magic {
		return fmt.Errorf("%s: magic 0x%08x, want 0x%08x", what, m, magic)
	}
	if v := le.Uint32(b[4:]); v != version {
		return fmt.Errorf("%s: version %d, want %d", what, v, version)
	}
	if s := le.Uint32(b[8:]); s != uint32(size) {
		return fmt.Errorf("%s: size field %d, want %d", what, s, size)
	}
	if c := le.Uint32(b[controlOffDeviceCount:]); int(c) != n {
		return fmt.Errorf("%s: %d devices, want %d", what, c, n)
	}
	return nil
}

func word(b []byte, off int) *uint64 {
	_ = b[off+7]
	return (*uint64)(unsafe.Pointer(&b[off]))
}

func word32(b []byte, off int) *uint32 {
	_ = b[off+3]
	return (*uint32)(unsafe.Pointer(&b[off]))
}

// PublishControl writes device i's entry of a control file mapped in b (a
// shared mapping the limiter reads concurrently) under its seqlock, and bumps
// the heartbeat. b must be 8-byte aligned (an mmap is).
func PublishControl(b []byte, i int, d ControlDevice) {
	base := controlHeaderSize + i*controlDeviceSize
	seq := word(b, base)
	s := atomic.LoadUint64(seq)
	if s&1 == 1 {
		s++ // a writer died mid-update: start from even
	}
	atomic.StoreUint64(seq, s+1)
	atomic.StoreUint64(word(b, base+controlOffAllowance), d.Allowance)
	atomic.StoreUint64(word(b, base+controlOffRate), math.Float64bits(d.Rate))
	atomic.StoreUint64(word(b, base+controlOffFallback), math.Float64bits(d.Fallback))
	atomic.StoreUint64(word(b, base+controlOffStamp), d.StampNs)
	atomic.StoreUint32(word32(b, base+controlOffMode), uint32(d.Mode))
	atomic.StoreUint32(word32(b, base+controlOffPeriod), d.PeriodUs)
	atomic.StoreUint32(word32(b, base+controlOffSlotPeriod), d.Slot.PeriodUs)
	atomic.StoreUint32(word32(b, base+controlOffSlotStart), d.Slot.StartUs)
	atomic.StoreUint32(word32(b, base+controlOffSlotLen), d.Slot.LenUs)
	var flags uint32
	if d.Slot.Confine {
		flags |= slotConfine
	}
	atomic.StoreUint32(word32(b, base+controlOffSlotFlags), flags)
	if len(b) >= ControlFileSize { // a version 1 file has no costs
		atomic.StoreUint64(word(b, controlOffCosts+8*i), math.Float64bits(d.Cost))
	}
	atomic.StoreUint64(seq, s+2)
}

// ReadControl reads device i's entry of a control file image and its seq
// (Cost 0 in a version 1 file).
func ReadControl(b []byte, i int) (ControlDevice, uint64) {
	base := controlHeaderSize + i*controlDeviceSize
	le := binary.LittleEndian
	var cost float64
	if len(b) >= ControlFileSize {
		cost = math.Float64frombits(le.Uint64(b[controlOffCosts+8*i:]))
	}
	return ControlDevice{
		Allowance: le.Uint64(b[base+controlOffAllowance:]),
		Rate:      math.Float64frombits(le.Uint64(b[base+controlOffRate:])),
		Fallback:  math.Float64frombits(le.Uint64(b[base+controlOffFallback:])),
		StampNs:   le.Uint64(b[base+controlOffStamp:]),
		Mode:      ControlMode(le.Uint32(b[base+controlOffMode:])),
		PeriodUs:  le.Uint32(b[base+controlOffPeriod:]),
		Slot: Slot{PeriodUs: le.Uint32(b[base+controlOffSlotPeriod:]), StartUs: le.Uint32(b[base+controlOffSlotStart:]),
			LenUs: le.Uint32(b[base+controlOffSlotLen:]), Confine: le.Uint32(b[base+controlOffSlotFlags:])&slotConfine != 0},
		Cost: cost,
	}, le.Uint64(b[base:])
}

// WriteUsage writes device i of a usage report image (libvcuda writes the
// real ones; tests forge them).
func WriteUsage(b []byte, i int, u UsageDevice) {
	base := controlHeaderSize + i*controlDeviceSize
	le := binary.LittleEndian
	le.PutUint64(b[base:], u.Launched)
	le.PutUint64(b[base+usageOffWaits:], u.Waits)
}

// ReadUsage reads device i of a usage report image (validate it with
// CheckUsage first).
func ReadUsage(b []byte, i int) UsageDevice {
	base := controlHeaderSize + i*controlDeviceSize
	le := binary.LittleEndian
	return UsageDevice{Launched: le.Uint64(b[base:]), Waits: le.Uint64(b[base+usageOffWaits:])}
}
