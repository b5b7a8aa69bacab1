package nvmlsim

import (
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// Xids the simulation gives effects beyond the event.
const (
	xidDoubleBitECC = 48 // uncorrectable ECC error: row remapping pending
	xidFallenOffBus = 79 // the GPU dropped off PCIe
)

// Faults of the simulated GPUs, as real NVML shows them: a GPU that fell off
// the bus answers ERROR_GPU_IS_LOST to every call (handle lookups included)
// until it comes back; a GPU whose row remapping is pending answers, but says
// so until it is reset; an event set whose wait fails fails every wait.

// FallOffBus makes a GPU lost and raises Xid 79 on it, in that order, as the
// driver does.
func (s *Sim) FallOffBus(uuid string) error {
	i := s.index(uuid)
	if i < 0 {
		return fmt.Errorf("simulated node %s has no GPU %q", s.node.Name, uuid)
	}
	// Registered sets still get the Xid: the driver raises it for the
	// handles registered before the GPU went.
	if err := s.InjectXID(uuid, xidFallenOffBus); err != nil {
		return err
	}
	s.mu.Lock()
	s.lost[i] = true
	s.mu.Unlock()
	return nil
}

// Reset brings a GPU back (a GPU reset or a re-seated card): it answers
// again and its pending row remapping is done.
func (s *Sim) Reset(uuid string) error {
	i := s.index(uuid)
	if i < 0 {
		return fmt.Errorf("simulated node %s has no GPU %q", s.node.Name, uuid)
	}
	s.mu.Lock()
	s.lost[i], s.remapPending[i] = false, false
	s.mu.Unlock()
	return nil
}

// SetRemapPending marks a row remapping pending on a GPU (what an
// uncorrectable ECC error leaves until the GPU is reset).
func (s *Sim) SetRemapPending(uuid string) error {
	i := s.index(uuid)
	if i < 0 {
		return fmt.Errorf("simulated node %s has no GPU %q", s.node.Name, uuid)
	}
	s.mu.Lock()
	s.remapPending[i] = true
	s.mu.Unlock()
	return nil
}

// FailEventWaits makes every Wait of every event set return ret
// (nvml.SUCCESS: waits work again).
func (s *Sim) FailEventWaits(ret nvml.Return) {
	s.mu.Lock()
	s.waitErr = ret
	s.mu.Unlock()
}

func (s *Sim) isLost(i int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lost[i]
}

func (s *Sim) waitError() nvml.Return {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.waitErr
}
