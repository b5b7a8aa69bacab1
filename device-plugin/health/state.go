package health

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sort"
	"time"

	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/atomicfile"
	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/gpu"
)

// StateFile is the name of the kept health state in the plugin's state
// directory. Only the device plugin reads it (no other component does), so
// its format is local to this package.
const StateFile = "health.json"

// stateVersion is the only version LoadState reads.
const stateVersion = "v1"

// ErrBadState is wrapped by LoadState when the file is not a state this
// build reads.
var ErrBadState = errors.New("unreadable GPU health state")

// State is what the plugin keeps across restarts: the last full description
// of each GPU (so a GPU NVML cannot describe at the next start is still
// offered, as unhealthy) and the unhealthy GPUs.
type State struct {
	GPUs      []gpu.Device
	Unhealthy map[string]Unhealthy
}

type stateV1 struct {
	Version   string        `json:"version"`
	GPUs      []gpuV1       `json:"gpus"`
	Unhealthy []unhealthyV1 `json:"unhealthy"`
}

type gpuV1 struct {
	Index       int    `json:"index"`
	UUID        string `json:"uuid"`
	Model       string `json:"model"`
	BusID       string `json:"busID"`
	MemoryMiB   int64  `json:"memoryMiB"`
	ReservedMiB int64  `json:"reservedMiB"`
	NUMA        int    `json:"numa"`
}

type unhealthyV1 struct {
	UUID    string    `json:"uuid"`
	Since   time.Time `json:"since"`
	LastBad time.Time `json:"lastBad"`
	XID     uint64    `json:"xid,omitempty"`
	Reason  string    `json:"reason"`
}

// LoadState reads the state file; a missing file is an empty state.
func LoadState(path string) (State, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return State{Unhealthy: map[string]Unhealthy{}}, nil
	}
	if err != nil {
		return State{}, err
	}
	return decodeState(data)
}

func decodeState(data []byte) (State, error) {
	var f stateV1
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return State{}, fmt.Errorf("%w: %v", ErrBadState, err)
	}
	if dec.More() {
		return State{}, fmt.Errorf("%w: data after the JSON object", ErrBadState)
	}
	if f.Version != stateVersion {
		return State{}, fmt.Errorf("%w: version: expected %q, got %q", ErrBadState, stateVersion, f.Version)
	}
	s := State{Unhealthy: map[string]Unhealthy{}}
	for i, g := range f.GPUs {
		if g.UUID == "" || g.Model == "" || g.MemoryMiB <= 0 || g.Index < 0 {
			return State{}, fmt.Errorf("%w: gpus[%d]: expected an index, a UUID, a model and a positive memoryMiB", ErrBadState, i)
		}
		s.GPUs = append(s.GPUs, gpu.Device{Index: g.Index, UUID: g.UUID, Model: g.Model, BusID: g.BusID, MemoryMiB: g.MemoryMiB, ReservedMiB: g.ReservedMiB, NUMA: g.NUMA})
	}
	for i, u := range f.Unhealthy {
		if u.UUID == "" || u.Since.IsZero() || u.LastBad.IsZero() {
			return State{}, fmt.Errorf("%w: unhealthy[%d]: expected a uuid, since and lastBad", ErrBadState, i)
		}
		s.Unhealthy[u.UUID] = Unhealthy{Since: u.Since, LastBad: u.LastBad, XID: u.XID, Reason: u.Reason}
	}
	return s, nil
}

// SaveState replaces the state file durably.
func SaveState(path string, s State) error {
	f := stateV1{Version: stateVersion, GPUs: []gpuV1{}, Unhealthy: []unhealthyV1{}}
	for _, g := range s.GPUs {
		f.GPUs = append(f.GPUs, gpuV1{Index: g.Index, UUID: g.UUID, Model: g.Model, BusID: g.BusID, MemoryMiB: g.MemoryMiB, ReservedMiB: g.ReservedMiB, NUMA: g.NUMA})
	}
	for uuid, u := range s.Unhealthy {
		f.Unhealthy = append(f.Unhealthy, unhealthyV1{UUID: uuid, Since: u.Since.UTC(), LastBad: u.LastBad.UTC(), XID: u.XID, Reason: u.Reason})
	}
	sort.Slice(f.Unhealthy, func(i, j int) bool { return f.Unhealthy[i].UUID < f.Unhealthy[j].UUID })
	data, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return err
	}
	if err := atomicfile.Write(path, append(data, '\n'), 0o644); err != nil {
		return fmt.Errorf("GPU health state %s: %w", path, err)
	}
	return nil
}

// Describe completes devs from the kept descriptions: a GPU NVML could not
// describe now takes its last description (by UUID, else by index) and keeps
// its Failure. It returns the devices that can be offered and the indexes of
// those with no UUID at all, which cannot.
func Describe(devs []gpu.Device, kept []gpu.Device) (out []gpu.Device, unnamed []int) {
	found := map[string]bool{}
	for _, d := range devs {
		found[d.UUID] = d.UUID != ""
	}
	for _, d := range devs {
		if d.Failure == "" {
			out = append(out, d)
			continue
		}
		for _, k := range kept {
			if d.UUID == "" && found[k.UUID] {
				continue // that GPU answered in another slot
			}
			if d.UUID == k.UUID || d.UUID == "" && k.Index == d.Index {
				failure := d.Failure
				d = k
				d.Failure = failure
				break
			}
		}
		if d.UUID == "" {
			unnamed = append(unnamed, d.Index)
			continue
		}
		if d.Model == "" {
			d.Model = "unknown"
		}
		out = append(out, d)
	}
	return out, unnamed
}

// Descriptions merges the fully discovered devs into kept, for SaveState.
func Descriptions(devs []gpu.Device, kept []gpu.Device) []gpu.Device {
	byUUID := map[string]gpu.Device{}
	for _, k := range kept {
		byUUID[k.UUID] = k
	}
	for _, d := range devs {
		if d.Failure == "" && d.MemoryMiB > 0 {
			byUUID[d.UUID] = d
		}
	}
	out := make([]gpu.Device, 0, len(byUUID))
	for _, d := range byUUID {
		out = append(out, d)
	}
	sort.Slice(out, func(i, j int) bool {
		return out[i].Index < out[j].Index || out[i].Index == out[j].Index && out[i].UUID < out[j].UUID
	})
	return out
}
