package api

import (
	"encoding/binary"
	"fmt"
)

// The container's shared region (vcuda/src/vcuda.h, struct vc_region), in
// the container's shared dir: libvcuda books every process's device memory
// there under a process-shared lock. The node reads only the header and each
// device's booked total; the layout is checked against the C compiler's by
// region_test.go. The container can write the file, so what it says is an
// untrusted report (see RegionUsed).
const (
	RegionFile        = "vcuda.region"
	RegionMagic       = 0x47455256 // "VREG"
	RegionVersion     = 1
	RegionSize        = 42048 // sizeof(struct vc_region)
	regionDevOffset   = 64    // offsetof(struct vc_region, dev)
	regionDevSize     = 320   // sizeof(struct vc_region_dev); used is its first field
	RegionHeadSize    = regionDevOffset + regionDevSize*LimiterConfigMaxDevices
	regionOffSize     = 8
	regionOffDevCount = 12
)

// RegionUsed reads the bytes each of the n devices has booked from the first
// RegionHeadSize bytes of a region file. An error names what does not match
// (another libvcuda version, a file of another container). The numbers are
// the container's own claim: check them against what the node measures
// before acting on them.
func RegionUsed(b []byte, n int) ([]uint64, error) {
	if len(b) < RegionHeadSize {
		return nil, fmt.Errorf("shared region: %d bytes, want at least %d", len(b), RegionHeadSize)
	}
	le := binary.LittleEndian
	magic, version := le.Uint32(b), le.Uint32(b[4:])
	size, ndev := le.Uint32(b[regionOffSize:]), le.Uint32(b[regionOffDevCount:])
	switch {
	case magic != RegionMagic:
		return nil, fmt.Errorf("shared region: magic %#x, want %#x (not initialised by libvcuda yet?)", magic, RegionMagic)
	case version != RegionVersion || size != RegionSize:
		return nil, fmt.Errorf("shared region: version %d, size %d; want version %d, size %d (libvcuda and the device plugin are of different releases)", version, size, RegionVersion, RegionSize)
	case int(ndev) != n || n > LimiterConfigMaxDevices:
		return nil, fmt.Errorf("shared region: %d devices, the container's limiter config has %d", ndev, n)
	}
	out := make([]uint64, n)
	for i := range out {
		out[i] = le.Uint64(b[regionDevOffset+i*regionDevSize:])
	}
	return out, nil
}
