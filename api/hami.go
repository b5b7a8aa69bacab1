package api

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Annotations of Volcano's built-in deviceshare plugin (HAMi's format),
// published by the device plugin when report.hami is on so deviceshare can
// schedule the same nodes (the benchmark's rival).
const (
	// HAMiRegisterKey lists the node's GPUs: "<uuid>,<count>,<MiB>,<type>,<healthy>,<mode>:" each.
	HAMiRegisterKey = "volcano.sh/node-vgpu-register"
	// HAMiHandshakeKey: the scheduler writes "Requesting_<time>", the device
	// plugin answers "Reported_<time>"; unanswered for 60s, deviceshare drops
	// the node's GPUs ("Deleted_<time>").
	HAMiHandshakeKey = "volcano.sh/node-vgpu-handshake"
	// HAMiTimeLayout is the handshake's time format (local time, no zone).
	HAMiTimeLayout = "2006.01.02 15:04:05"
)

// Handshake states.
const (
	HAMiRequesting = "Requesting"
	HAMiReported   = "Reported"
	HAMiDeleted    = "Deleted"
)

// HAMiDevice is one GPU in HAMi's register annotation.
type HAMiDevice struct {
	UUID      string
	Count     int    // containers it may serve
	MemoryMiB int64  // memory on offer
	Type      string // "NVIDIA-<model>", matched by deviceshare's gpu type annotations
	Healthy   bool
	Mode      string
}

// HAMiDevices converts an inventory to HAMi devices, in index order.
func HAMiDevices(inv Inventory) []HAMiDevice {
	out := make([]HAMiDevice, 0, len(inv.GPUs))
	for _, g := range inv.GPUs {
		out = append(out, HAMiDevice{UUID: g.UUID, Count: g.MaxShares, MemoryMiB: g.MemoryMiB, Type: DeviceShareTypePrefix + g.Model, Healthy: g.Healthy, Mode: ModeTimeSliced.Volcano()})
	}
	return out
}

// EncodeHAMiRegister renders the register annotation.
func EncodeHAMiRegister(devs []HAMiDevice) (string, error) {
	var b strings.Builder
	for i, d := range devs {
		for _, f := range []struct{ name, v string }{{"uuid", d.UUID}, {"type", d.Type}, {"mode", d.Mode}} {
			if f.v == "" || strings.ContainsAny(f.v, ",:") {
				return "", fieldErr(HAMiRegisterKey, fmt.Sprintf("[%d].%s", i, f.name), "a non-empty value without ',' or ':'", fmt.Sprintf("%q", f.v))
			}
		}
		if d.Count < 0 || d.MemoryMiB < 0 {
			return "", fieldErr(HAMiRegisterKey, fmt.Sprintf("[%d]", i), "a non-negative count and memory", fmt.Sprintf("%d, %d", d.Count, d.MemoryMiB))
		}
		fmt.Fprintf(&b, "%s,%d,%d,%s,%t,%s:", d.UUID, d.Count, d.MemoryMiB, d.Type, d.Healthy, d.Mode)
	}
	return b.String(), nil
}

// DecodeHAMiRegister parses the register annotation strictly.
func DecodeHAMiRegister(v string) ([]HAMiDevice, error) {
	if !strings.HasSuffix(v, ":") {
		return nil, fieldErr(HAMiRegisterKey, "", "devices each ending in ':'", fmt.Sprintf("%q", v))
	}
	var out []HAMiDevice
	for i, item := range strings.Split(strings.TrimSuffix(v, ":"), ":") {
		f := strings.Split(item, ",")
		if len(f) != 6 {
			return nil, fieldErr(HAMiRegisterKey, fmt.Sprintf("[%d]", i), "6 comma-separated fields", len(f))
		}
		count, err1 := strconv.Atoi(f[1])
		mem, err2 := strconv.ParseInt(f[2], 10, 64)
		healthy, err3 := strconv.ParseBool(f[4])
		if err1 != nil || err2 != nil || err3 != nil {
			return nil, fieldErr(HAMiRegisterKey, fmt.Sprintf("[%d]", i), "<uuid>,<count>,<MiB>,<type>,<true|false>,<mode>", fmt.Sprintf("%q", item))
		}
		out = append(out, HAMiDevice{UUID: f[0], Count: count, MemoryMiB: mem, Type: f[3], Healthy: healthy, Mode: f[5]})
	}
	if _, err := EncodeHAMiRegister(out); err != nil {
		return nil, err
	}
	return out, nil
}

// HAMiHandshake renders "<state>_<time>".
func HAMiHandshake(state string, t time.Time) string { return state + "_" + t.Format(HAMiTimeLayout) }

// ParseHAMiHandshake splits a handshake into its state and time.
func ParseHAMiHandshake(v string) (string, time.Time, error) {
	state, ts, ok := strings.Cut(v, "_")
	if !ok || (state != HAMiRequesting && state != HAMiReported && state != HAMiDeleted) {
		return "", time.Time{}, fieldErr(HAMiHandshakeKey, "", "Requesting_, Reported_ or Deleted_ followed by a time", fmt.Sprintf("%q", v))
	}
	t, err := time.ParseInLocation(HAMiTimeLayout, ts, time.Local)
	if err != nil {
		return "", time.Time{}, fieldErr(HAMiHandshakeKey, "", "a time such as "+HAMiTimeLayout, fmt.Sprintf("%q", ts))
	}
	return state, t, nil
}
