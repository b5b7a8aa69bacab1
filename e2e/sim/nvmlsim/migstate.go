package nvmlsim

// The simulated GPUs' MIG state kept in a file, so that a device plugin
// restart on a simulated node finds the instances it left, as on a real
// GPU (instances outlive the processes that made them; a reboot or GPU
// reset does not happen here).

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/atomicfile"
	"github.com/volcano-vgpu/volcano-vgpu/e2e/sim/migtable"
)

// MIGStateVersion is the version of the MIG state file.
const MIGStateVersion = "v1"

// MIGState is the MIG state file: for each MIG-capable GPU its mode and
// its GPU instances with their compute instance's MIG device. Processes on
// the instances are not kept (they are the tests' own, RunOnMIG).
type MIGState struct {
	Version string        `json:"version"`
	GPUs    []MIGStateGPU `json:"gpus"`
}

// MIGStateGPU is one GPU's MIG state.
type MIGStateGPU struct {
	UUID string `json:"uuid"`
	MIG  bool   `json:"mig"`
	// Created counts the compute instances ever created: fresh MIG UUIDs
	// after a restart differ from every earlier one.
	Created   int                `json:"created"`
	Instances []MIGStateInstance `json:"instances,omitempty"`
}

// MIGStateInstance is one GPU instance.
type MIGStateInstance struct {
	ID        int                `json:"id"`
	Profile   string             `json:"profile"`
	Placement migtable.Placement `json:"placement"`
	// UUID of its compute instance's MIG device; "" when it has none.
	UUID string `json:"uuid,omitempty"`
}

// PersistMIG keeps the MIG state of the simulated GPUs in the file at path:
// the instances the file lists are created again now (with their IDs and
// MIG UUIDs), and every later create or destroy writes the file. A GPU's
// MIG mode is the node's (the simulated-cluster file, --mig-gpus), as
// nvidia-smi -mig sets it: the instances of a GPU whose mode is off now are
// dropped, as turning MIG off needs them gone. A missing file is an empty
// state.
func (s *Sim) PersistMIG(path string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, err := os.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return fmt.Errorf("simulated MIG state: %w", err)
	default:
		if err := s.loadMIG(b); err != nil {
			return fmt.Errorf("simulated MIG state %s: %w", path, err)
		}
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("simulated MIG state: %w", err)
	}
	s.migFile = path
	return s.saveMIG()
}

// loadMIG creates the instances of state b. Call with s.mu held.
func (s *Sim) loadMIG(b []byte) error {
	var st MIGState
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&st); err != nil {
		return err
	}
	if st.Version != MIGStateVersion {
		return fmt.Errorf("version %q, expected %q", st.Version, MIGStateVersion)
	}
	for _, g := range st.GPUs {
		i := s.index(g.UUID)
		switch {
		case i < 0:
			return fmt.Errorf("GPU %s: not a GPU of node %s", g.UUID, s.node.Name)
		case s.mig[i] == nil:
			return fmt.Errorf("GPU %s: a %s has no MIG mode", g.UUID, s.node.GPUs[i].Model)
		case !s.mig[i].enabled:
			continue
		}
		m := s.mig[i]
		m.created = g.Created
		for _, in := range g.Instances {
			p, ok := m.table.Profile(in.Profile)
			if !ok {
				return fmt.Errorf("GPU %s: no profile %s", g.UUID, in.Profile)
			}
			if ret := s.createRet(i, p, in.Placement); ret != nvml.SUCCESS || in.ID < 1 {
				return fmt.Errorf("GPU %s: GPU instance %d (%s at %v): %v", g.UUID, in.ID, in.Profile, in.Placement, ret)
			}
			gi := s.createGPUInstance(i, s.devices[i], p, in.Placement, in.ID)
			if in.UUID != "" {
				info := nvml.ComputeInstanceProfileInfo{SliceCount: uint32(p.Slices)}
				for c, n := range ciProfiles() {
					if n == p.Slices {
						info.Id = uint32(c)
					}
				}
				gi.ci = s.newComputeInstance(i, s.devices[i], gi, info, in.UUID)
			}
		}
	}
	return nil
}

// saveMIG writes the MIG state file (none: nothing). Call with s.mu held.
func (s *Sim) saveMIG() error {
	if s.migFile == "" {
		return nil
	}
	st := MIGState{Version: MIGStateVersion, GPUs: []MIGStateGPU{}}
	for i, m := range s.mig {
		if m == nil {
			continue
		}
		g := MIGStateGPU{UUID: s.node.GPUs[i].UUID, MIG: m.enabled, Created: m.created}
		for _, gi := range m.gis {
			in := MIGStateInstance{ID: gi.id, Profile: gi.profile.Name, Placement: gi.place}
			if gi.ci != nil {
				in.UUID = gi.ci.uuid
			}
			g.Instances = append(g.Instances, in)
		}
		st.GPUs = append(st.GPUs, g)
	}
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.Write(s.migFile, append(b, '\n'), 0o644)
}

// savedRet writes the MIG state file after a change: SUCCESS, or
// ERROR_UNKNOWN when it cannot be written (the change is made; a restart
// would not find it). Call with s.mu held.
func (s *Sim) savedRet() nvml.Return {
	if err := s.saveMIG(); err != nil {
		return nvml.ERROR_UNKNOWN
	}
	return nvml.SUCCESS
}
