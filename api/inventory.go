package api

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// PCIeLevel is how far apart two GPUs are on the PCIe fabric, from NVML's
// topology common ancestor. Lower is closer.
type PCIeLevel int

// PCIe levels, in NVML's order.
const (
	PCIeInternal   PCIeLevel = iota // same board (multi-GPU card)
	PCIeSingle                      // one PCIe switch
	PCIeMultiple                    // several PCIe switches, no host bridge
	PCIeHostBridge                  // same host bridge
	PCIeNode                        // same NUMA node, across host bridges
	PCIeSystem                      // across NUMA nodes (SMP interconnect)
)

var pcieNames = [...]string{"internal", "single", "multiple", "hostbridge", "node", "system"}

func (l PCIeLevel) String() string {
	if l < 0 || int(l) >= len(pcieNames) {
		return fmt.Sprintf("PCIeLevel(%d)", int(l))
	}
	return pcieNames[l]
}

// Valid reports whether l is a known level.
func (l PCIeLevel) Valid() bool { return l >= 0 && int(l) < len(pcieNames) }

// MaxShares bounds GPU.MaxShares: more tenants than this on one GPU is a
// configuration mistake, and it keeps ListAndWatch under kubelet's limits.
const MaxShares = 100

// GPU is one physical GPU as the device plugin sees it.
type GPU struct {
	Index     int    `json:"index"`
	UUID      string `json:"uuid"`
	Model     string `json:"model"`
	MemoryMiB int64  `json:"memoryMiB"`
	Healthy   bool   `json:"healthy"`
	NUMA      int    `json:"numa"`
	MaxShares int    `json:"maxShares"`
	// Mode is how the GPU is shared (ServedModes); "" (plugins older than
	// the field) is time-sliced. Use SharingMode to read it.
	Mode GPUMode `json:"mode,omitempty"`
	// MIG: the profiles, placements and instances of a GPU in mode mig
	// (nil only when it is unhealthy and NVML could not describe it); nil in
	// every other mode.
	MIG *MIG `json:"mig,omitempty"`
}

// SharingMode is g.Mode, time-sliced where the inventory names none.
func (g GPU) SharingMode() GPUMode {
	if g.Mode == "" {
		return ModeTimeSliced
	}
	return g.Mode
}

// Link is the connection between two GPUs.
type Link struct {
	NVLinks int       // number of active NVLinks between the two (0: none)
	PCIe    PCIeLevel // PCIe distance
}

// Inventory is what the device plugin publishes on its node.
type Inventory struct {
	Version   string    `json:"version"`
	Heartbeat time.Time `json:"heartbeat"`
	GPUs      []GPU     `json:"gpus"`
	// NVLinks[i][j] is the number of NVLinks between GPUs[i] and GPUs[j]
	// (by position in GPUs, not by GPU.Index); symmetric, zero diagonal.
	NVLinks [][]int `json:"nvlinks"`
	// PCIe[i][j] is the PCIe level between GPUs[i] and GPUs[j].
	PCIe [][]PCIeLevel `json:"pcie"`
}

// Link returns the link between the GPUs at positions i and j.
func (inv *Inventory) Link(i, j int) Link {
	return Link{NVLinks: inv.NVLinks[i][j], PCIe: inv.PCIe[i][j]}
}

// Stale reports whether the heartbeat is older than maxAge at now.
func (inv *Inventory) Stale(now time.Time, maxAge time.Duration) bool {
	return now.Sub(inv.Heartbeat) > maxAge
}

// EncodeInventory validates inv and renders it for InventoryKey.
func EncodeInventory(inv Inventory) (string, error) {
	inv.Version = Version
	if err := inv.validate(); err != nil {
		return "", err
	}
	b, err := json.Marshal(inv)
	if err != nil {
		return "", fmt.Errorf("%s: %w", InventoryKey, err)
	}
	return string(b), nil
}

// DecodeInventory parses and validates the value of InventoryKey.
func DecodeInventory(value string) (Inventory, error) {
	var inv Inventory
	if err := decodeStrict(InventoryKey, value, &inv); err != nil {
		return Inventory{}, err
	}
	if err := inv.validate(); err != nil {
		return Inventory{}, err
	}
	for _, g := range inv.GPUs {
		if g.MIG != nil && len(g.MIG.Instances) == 0 {
			g.MIG.Instances = nil // "instances":[] reads as none, as the encoder writes it
		}
	}
	return inv, nil
}

func (inv *Inventory) validate() error {
	const k = InventoryKey
	if err := checkVersion(k, inv.Version); err != nil {
		return err
	}
	if inv.Heartbeat.IsZero() {
		return fieldErr(k, "heartbeat", "an RFC 3339 time", "none")
	}
	uuids := make(map[string]int, len(inv.GPUs))
	indexes := make(map[int]int, len(inv.GPUs))
	for i, g := range inv.GPUs {
		f := func(name string) string { return fmt.Sprintf("gpus[%d].%s", i, name) }
		switch {
		case g.Index < 0:
			return fieldErr(k, f("index"), "a non-negative integer", g.Index)
		case !validUUID(g.UUID):
			return fieldErr(k, f("uuid"), "a GPU UUID such as GPU-5a7c…, printable, at most 95 characters", fmt.Sprintf("%q", g.UUID))
		case g.Model == "" || len(g.Model) > 128:
			return fieldErr(k, f("model"), "a model name of 1 to 128 characters", fmt.Sprintf("%q", g.Model))
		case g.MemoryMiB < 0 || g.MemoryMiB == 0 && g.Healthy:
			// 0: an unhealthy GPU whose memory NVML could not read
			return fieldErr(k, f("memoryMiB"), "a positive number of MiB (0 only on an unhealthy GPU)", g.MemoryMiB)
		case g.NUMA < -1:
			return fieldErr(k, f("numa"), "a NUMA node number, or -1 for unknown", g.NUMA)
		case g.MaxShares < 1 || g.MaxShares > MaxShares:
			return fieldErr(k, f("maxShares"), fmt.Sprintf("an integer from 1 to %d", MaxShares), g.MaxShares)
		}
		if g.Mode != "" {
			if _, err := ParseGPUMode(k, g.Mode); err != nil {
				return fieldErr(k, f("mode"), err.(*FieldError).Expected, fmt.Sprintf("%q", g.Mode))
			}
		}
		switch {
		case g.Mode == ModeMIG && g.MIG == nil && g.Healthy:
			// an unhealthy one may lack it: NVML could not describe the GPU
			return fieldErr(k, f("mig"), "the GPU's MIG profiles for a healthy GPU in mode mig", "none")
		case g.Mode != ModeMIG && g.MIG != nil:
			return fieldErr(k, f("mig"), "no MIG state outside mode mig", "mode "+string(g.SharingMode()))
		case g.MIG != nil:
			if err := g.MIG.validate(k, f); err != nil {
				return err
			}
		}
		if j, dup := uuids[g.UUID]; dup {
			return fieldErr(k, f("uuid"), fmt.Sprintf("a UUID not already used by gpus[%d]", j), g.UUID)
		}
		if j, dup := indexes[g.Index]; dup {
			return fieldErr(k, f("index"), fmt.Sprintf("an index not already used by gpus[%d]", j), g.Index)
		}
		uuids[g.UUID], indexes[g.Index] = i, i
	}
	n := len(inv.GPUs)
	if err := checkMatrix(k, "nvlinks", inv.NVLinks, n, func(v int) bool { return v >= 0 && v <= 64 }, "a count of NVLinks from 0 to 64"); err != nil {
		return err
	}
	return checkMatrix(k, "pcie", inv.PCIe, n, PCIeLevel.Valid, "a PCIe level from 0 ("+PCIeInternal.String()+") to 5 ("+PCIeSystem.String()+")")
}

func checkMatrix[T comparable](key, name string, m [][]T, n int, ok func(T) bool, expected string) error {
	if len(m) != n {
		return fieldErr(key, name, fmt.Sprintf("a %d×%d matrix (one row per GPU)", n, n), fmt.Sprintf("%d rows", len(m)))
	}
	for i := range m {
		if len(m[i]) != n {
			return fieldErr(key, fmt.Sprintf("%s[%d]", name, i), fmt.Sprintf("%d columns", n), len(m[i]))
		}
		for j, v := range m[i] {
			if !ok(v) {
				return fieldErr(key, fmt.Sprintf("%s[%d][%d]", name, i, j), expected, v)
			}
			if m[j] != nil && len(m[j]) == n && m[j][i] != v {
				return fieldErr(key, fmt.Sprintf("%s[%d][%d]", name, i, j), fmt.Sprintf("the same value as %s[%d][%d] (links are symmetric)", name, j, i), v)
			}
		}
	}
	return nil
}

// ValidUUID reports whether s can be a GPU UUID in our payloads: printable,
// no comma or space, at most 95 characters.
func ValidUUID(s string) bool { return validUUID(s) }

func validUUID(s string) bool {
	if s == "" || len(s) > 95 || strings.ContainsAny(s, ", ") {
		return false
	}
	for _, r := range s {
		if r < 0x21 || r > 0x7e {
			return false
		}
	}
	return true
}
