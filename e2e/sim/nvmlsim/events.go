package nvmlsim

import (
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
)

// eventSet is the simulated nvml.EventSet: injected events queue up until
// Wait takes them.
type eventSet struct {
	*mock.EventSet
	sim        *Sim
	mu         sync.Mutex
	registered map[nvml.Device]uint64
	queue      chan nvml.EventData
}

func (s *Sim) newEventSet() (nvml.EventSet, nvml.Return) {
	es := &eventSet{sim: s, registered: map[nvml.Device]uint64{}, queue: make(chan nvml.EventData, 256)}
	es.EventSet = &mock.EventSet{
		WaitFunc: es.wait,
		FreeFunc: func() nvml.Return {
			s.mu.Lock()
			defer s.mu.Unlock()
			s.sets = slices.DeleteFunc(s.sets, func(x *eventSet) bool { return x == es })
			return nvml.SUCCESS
		},
	}
	s.mu.Lock()
	s.sets = append(s.sets, es)
	s.mu.Unlock()
	return es, nvml.SUCCESS
}

func (es *eventSet) register(d nvml.Device, types uint64) {
	es.mu.Lock()
	defer es.mu.Unlock()
	es.registered[d] |= types
}

func (es *eventSet) wants(d nvml.Device, typ uint64) bool {
	es.mu.Lock()
	defer es.mu.Unlock()
	if d == nil { // all devices
		for _, t := range es.registered {
			if t&typ != 0 {
				return true
			}
		}
		return false
	}
	return es.registered[d]&typ != 0
}

func (es *eventSet) wait(timeoutMs uint32) (nvml.EventData, nvml.Return) {
	if ret := es.sim.waitError(); ret != nvml.SUCCESS {
		return nvml.EventData{}, ret
	}
	t := time.NewTimer(time.Duration(timeoutMs) * time.Millisecond)
	defer t.Stop()
	select {
	case e := <-es.queue:
		return e, nvml.SUCCESS
	case <-t.C:
		return nvml.EventData{}, nvml.ERROR_TIMEOUT
	}
}

// InjectXID raises an Xid critical error on the GPU with the given UUID, or
// on every GPU when uuid is empty, in every event set registered for it.
func (s *Sim) InjectXID(uuid string, xid uint64) error {
	var dev nvml.Device
	if uuid != "" {
		i := s.index(uuid)
		if i < 0 {
			return fmt.Errorf("simulated node %s has no GPU %q", s.node.Name, uuid)
		}
		dev = s.devices[i]
	}
	e := nvml.EventData{Device: dev, EventType: nvml.EventTypeXidCriticalError, EventData: xid}
	if xid == xidDoubleBitECC && uuid != "" {
		// as on Ampere and later: the bad row is remapped at the next reset
		if err := s.SetRemapPending(uuid); err != nil {
			return err
		}
	}
	s.mu.Lock()
	sets := slices.Clone(s.sets)
	s.mu.Unlock()
	for _, es := range sets {
		if !es.wants(dev, nvml.EventTypeXidCriticalError) {
			continue
		}
		select {
		case es.queue <- e:
		default:
			return fmt.Errorf("simulated node %s: event queue full", s.node.Name)
		}
	}
	return nil
}

// GPUUUID resolves a GPU given as UUID or index, for injection files.
func (s *Sim) GPUUUID(ref string) (string, error) {
	if ref == "*" || ref == "all" {
		return "", nil
	}
	if s.index(ref) >= 0 {
		return ref, nil
	}
	for _, g := range s.node.GPUs {
		if fmt.Sprint(g.Index) == ref {
			return g.UUID, nil
		}
	}
	return "", fmt.Errorf("simulated node %s has no GPU %q (give a UUID, an index or \"all\")", s.node.Name, ref)
}
