package api

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"regexp"
	"strings"
)

// The limiter config is the binary file the device plugin writes for one
// container and mounts read-only at LimiterConfigPath; libvcuda.so reads it
// once. Its layout is pinned by vcuda/include/vcuda_config.h (with
// _Static_assert) and mirrored here by limiterConfigWire; the two are compared
// byte for byte by a test that compiles a C program against the header.
//
//	offset size field
//	     0    4 magic           0x47464356 ("VCFG")
//	     4    4 version         1
//	     8    4 size            2016
//	    12    4 policy          0 none, 1 fixed, 2 balance
//	    16    4 device_count    1..16
//	    20    4 mps_thread_percent 0: time-sliced; 1..100: MPS, CUDA_MPS_ACTIVE_THREAD_PERCENTAGE
//	    24   64 pod_uid         NUL-terminated, zero-padded (all strings)
//	    88   64 pod_namespace
//	   152  256 pod_name
//	   408   64 container_name
//	   472  256 shared_dir      absolute path inside the container
//	   728 16×80 devices        uuid[64], memory_limit u64 (bytes), core_percent u32, context_mib u32
//	  2008    4 reserved_tail   0
//	  2012    4 crc32           CRC-32/IEEE of bytes [0, 2012)
//
// Little-endian throughout. Unused device entries are all zero.
const (
	LimiterConfigMagic      uint32 = 0x47464356
	LimiterConfigVersion    uint32 = 1
	LimiterConfigSize              = 2016
	LimiterConfigPath              = "/etc/vcuda/vcuda.config"
	LimiterConfigMaxDevices        = 16

	limiterKey = "limiter config"
)

// LimiterDevice is one GPU's limits.
type LimiterDevice struct {
	UUID             string // "GPU-…" or "MIG-…" with 8-4-4-4-12 hex digits
	MemoryLimitBytes uint64 // > 0
	CorePercent      uint32 // 1..100; 100 means no compute limit on this GPU
	// ContextMiB is what each CUDA context a process opens on this GPU takes
	// of the device (measured per GPU model), counted against MemoryLimitBytes;
	// 0: not counted. Less than the memory limit.
	ContextMiB uint32
}

// LimiterConfig is what one container's libvcuda.so enforces.
type LimiterConfig struct {
	Policy        ComputePolicy // ComputeNone, ComputeFixed or ComputeBalance
	PodUID        string
	PodNamespace  string
	PodName       string
	ContainerName string
	SharedDir     string // per-container dir shared by its processes (absolute, in the container)
	Devices       []LimiterDevice
	// MPSThreadPercent: 0 for time-sliced GPUs; 1..100 when the container's
	// GPU is in MPS mode: libvcuda sets CUDA_MPS_ACTIVE_THREAD_PERCENTAGE to
	// it (a process may lower it, never raise it) and
	// CUDA_MPS_PINNED_DEVICE_MEM_LIMIT from each device's memory limit. Its
	// devices then carry CorePercent 100: the SM partition, not libvcuda's
	// launch throttle, bounds compute.
	MPSThreadPercent uint32
}

type limiterDeviceWire struct {
	UUID        [64]byte
	MemoryLimit uint64
	CorePercent uint32
	ContextMiB  uint32
}

type limiterConfigWire struct {
	Magic, Version, Size, Policy, DeviceCount, MPSThreadPercent uint32
	PodUID                                                      [64]byte
	PodNamespace                                                [64]byte
	PodName                                                     [256]byte
	ContainerName                                               [64]byte
	SharedDir                                                   [256]byte
	Devices                                                     [LimiterConfigMaxDevices]limiterDeviceWire
	ReservedTail                                                uint32
	CRC32                                                       uint32
}

var limiterPolicies = map[ComputePolicy]uint32{ComputeNone: 0, ComputeFixed: 1, ComputeBalance: 2}

var gpuUUID = regexp.MustCompile(`^(GPU|MIG)-[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`)

type limiterString struct {
	field string
	value string
	max   int // array size, including the terminating NUL
}

func (c *LimiterConfig) strings() []limiterString {
	return []limiterString{
		{"pod_uid", c.PodUID, 64}, {"pod_namespace", c.PodNamespace, 64}, {"pod_name", c.PodName, 256},
		{"container_name", c.ContainerName, 64}, {"shared_dir", c.SharedDir, 256},
	}
}

// Validate checks what libvcuda.so checks, so that whatever encodes is accepted
// by the limiter. Errors are *FieldError naming the field (C header names).
func (c *LimiterConfig) Validate() error {
	if _, ok := limiterPolicies[c.Policy]; !ok {
		return fieldErr(limiterKey, "policy", "none, fixed or balance", fmt.Sprintf("%q", c.Policy))
	}
	if n := len(c.Devices); n < 1 || n > LimiterConfigMaxDevices {
		return fieldErr(limiterKey, "device_count", fmt.Sprintf("1..%d devices", LimiterConfigMaxDevices), n)
	}
	for _, s := range c.strings() {
		switch {
		case s.value == "":
			return fieldErr(limiterKey, s.field, "a non-empty string", nil)
		case len(s.value) > s.max-1:
			return fieldErr(limiterKey, s.field, fmt.Sprintf("at most %d bytes", s.max-1), len(s.value))
		case strings.IndexByte(s.value, 0) >= 0:
			return fieldErr(limiterKey, s.field, "no NUL bytes", fmt.Sprintf("%q", s.value))
		}
	}
	if !strings.HasPrefix(c.SharedDir, "/") {
		return fieldErr(limiterKey, "shared_dir", "an absolute path", fmt.Sprintf("%q", c.SharedDir))
	}
	if c.MPSThreadPercent > 100 {
		return fieldErr(limiterKey, "mps_thread_percent", "0 (not MPS) or 1..100", c.MPSThreadPercent)
	}
	seen := map[string]int{}
	for i, d := range c.Devices {
		if err := validateDevice(i, d, seen); err != nil {
			return err
		}
	}
	return nil
}

func validateDevice(i int, d LimiterDevice, seen map[string]int) error {
	f := fmt.Sprintf("devices[%d]", i)
	if !gpuUUID.MatchString(d.UUID) {
		return fieldErr(limiterKey, f+".uuid", "GPU- or MIG- and 8-4-4-4-12 hex digits", fmt.Sprintf("%q", d.UUID))
	}
	if j, dup := seen[d.UUID]; dup {
		return fieldErr(limiterKey, f+".uuid", fmt.Sprintf("a UUID not already in devices[%d]", j), d.UUID)
	}
	seen[d.UUID] = i
	if d.MemoryLimitBytes == 0 {
		return fieldErr(limiterKey, f+".memory_limit", "> 0 bytes", 0)
	}
	if d.CorePercent < 1 || d.CorePercent > 100 {
		return fieldErr(limiterKey, f+".core_percent", "1..100", d.CorePercent)
	}
	if uint64(d.ContextMiB)<<20 >= d.MemoryLimitBytes {
		return fieldErr(limiterKey, f+".context_mib", fmt.Sprintf("less than memory_limit (%d bytes): no process could open a context", d.MemoryLimitBytes), d.ContextMiB)
	}
	return nil
}

// Encode validates c and renders the exact bytes of struct vcuda_config.
func (c *LimiterConfig) Encode() ([]byte, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	w := limiterConfigWire{
		Magic: LimiterConfigMagic, Version: LimiterConfigVersion, Size: LimiterConfigSize,
		Policy: limiterPolicies[c.Policy], DeviceCount: uint32(len(c.Devices)), MPSThreadPercent: c.MPSThreadPercent,
	}
	copy(w.PodUID[:], c.PodUID)
	copy(w.PodNamespace[:], c.PodNamespace)
	copy(w.PodName[:], c.PodName)
	copy(w.ContainerName[:], c.ContainerName)
	copy(w.SharedDir[:], c.SharedDir)
	for i, d := range c.Devices {
		copy(w.Devices[i].UUID[:], d.UUID)
		w.Devices[i].MemoryLimit = d.MemoryLimitBytes
		w.Devices[i].CorePercent = d.CorePercent
		w.Devices[i].ContextMiB = d.ContextMiB
	}
	var buf bytes.Buffer
	buf.Grow(LimiterConfigSize)
	if err := binary.Write(&buf, binary.LittleEndian, &w); err != nil {
		return nil, err
	}
	b := buf.Bytes()
	binary.LittleEndian.PutUint32(b[LimiterConfigSize-4:], crc32.ChecksumIEEE(b[:LimiterConfigSize-4]))
	return b, nil
}

// cString reads a NUL-terminated, zero-padded field.
func cString(field string, b []byte) (string, error) {
	n := bytes.IndexByte(b, 0)
	if n < 0 {
		return "", fieldErr(limiterKey, field, fmt.Sprintf("NUL-terminated within %d bytes", len(b)), nil)
	}
	for _, x := range b[n:] {
		if x != 0 {
			return "", fieldErr(limiterKey, field, "zero padding after the string", nil)
		}
	}
	return string(b[:n]), nil
}

// DecodeLimiterConfig parses and checks the bytes of a limiter config file, in
// the same order as vcuda_config_validate.
func DecodeLimiterConfig(b []byte) (*LimiterConfig, error) {
	if len(b) != LimiterConfigSize {
		return nil, fieldErr(limiterKey, "size", fmt.Sprintf("%d bytes", LimiterConfigSize), len(b))
	}
	var w limiterConfigWire
	if err := binary.Read(bytes.NewReader(b), binary.LittleEndian, &w); err != nil {
		return nil, fieldErr(limiterKey, "", "a vcuda config", err.Error())
	}
	switch {
	case w.Magic != LimiterConfigMagic:
		return nil, fieldErr(limiterKey, "magic", fmt.Sprintf("0x%08x (a vcuda config)", LimiterConfigMagic), fmt.Sprintf("0x%08x", w.Magic))
	case w.Version != LimiterConfigVersion:
		return nil, fieldErr(limiterKey, "version", fmt.Sprint(LimiterConfigVersion), w.Version)
	case w.Size != LimiterConfigSize:
		return nil, fieldErr(limiterKey, "size", fmt.Sprint(LimiterConfigSize), w.Size)
	case w.CRC32 != crc32.ChecksumIEEE(b[:LimiterConfigSize-4]):
		return nil, fieldErr(limiterKey, "crc32", fmt.Sprintf("0x%08x (file corrupt)", crc32.ChecksumIEEE(b[:LimiterConfigSize-4])), fmt.Sprintf("0x%08x", w.CRC32))
	case w.Policy > 2:
		return nil, fieldErr(limiterKey, "policy", "0 (none), 1 (fixed) or 2 (balance)", w.Policy)
	case w.DeviceCount < 1 || w.DeviceCount > LimiterConfigMaxDevices:
		return nil, fieldErr(limiterKey, "device_count", fmt.Sprintf("1..%d", LimiterConfigMaxDevices), w.DeviceCount)
	case w.ReservedTail != 0:
		return nil, fieldErr(limiterKey, "reserved", "0", nil)
	}
	c := &LimiterConfig{Devices: make([]LimiterDevice, 0, w.DeviceCount), MPSThreadPercent: w.MPSThreadPercent}
	for p, v := range limiterPolicies {
		if v == w.Policy {
			c.Policy = p
		}
	}
	var err error
	for _, f := range []struct {
		name string
		src  []byte
		dst  *string
	}{
		{"pod_uid", w.PodUID[:], &c.PodUID}, {"pod_namespace", w.PodNamespace[:], &c.PodNamespace},
		{"pod_name", w.PodName[:], &c.PodName}, {"container_name", w.ContainerName[:], &c.ContainerName},
		{"shared_dir", w.SharedDir[:], &c.SharedDir},
	} {
		if *f.dst, err = cString(f.name, f.src); err != nil {
			return nil, err
		}
		if *f.dst == "" {
			return nil, fieldErr(limiterKey, f.name, "a non-empty string", nil)
		}
	}
	if !strings.HasPrefix(c.SharedDir, "/") {
		return nil, fieldErr(limiterKey, "shared_dir", "an absolute path", fmt.Sprintf("%q", c.SharedDir))
	}
	if c.MPSThreadPercent > 100 {
		return nil, fieldErr(limiterKey, "mps_thread_percent", "0 (not MPS) or 1..100", c.MPSThreadPercent)
	}
	seen := map[string]int{}
	for i := range w.Devices {
		d := &w.Devices[i]
		if uint32(i) >= w.DeviceCount {
			if *d != (limiterDeviceWire{}) {
				return nil, fieldErr(limiterKey, fmt.Sprintf("devices[%d]", i), "an unused entry, all zero", nil)
			}
			continue
		}
		uuid, err := cString(fmt.Sprintf("devices[%d].uuid", i), d.UUID[:])
		if err != nil {
			return nil, err
		}
		dev := LimiterDevice{UUID: uuid, MemoryLimitBytes: d.MemoryLimit, CorePercent: d.CorePercent, ContextMiB: d.ContextMiB}
		if err := validateDevice(i, dev, seen); err != nil {
			return nil, err
		}
		c.Devices = append(c.Devices, dev)
	}
	return c, nil
}
