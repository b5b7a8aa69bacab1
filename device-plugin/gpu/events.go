package gpu

import (
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// xidDoubleBitECC is the Xid the driver logs for an uncorrectable ECC error;
// NVML's double-bit ECC event carries no Xid, so it is reported as this one.
const xidDoubleBitECC = 48

type nvmlEvents struct {
	set    nvml.EventSet
	byUUID map[nvml.Device]string
}

var _ Events = (*nvmlEvents)(nil)

// Events registers for critical Xid and double-bit ECC events on every GPU
// that supports them and answers; only a failing event set is an error.
func (l *nvmlLib) Events(devs []Device) (Events, error) {
	hs := l.handles(devs)
	set, ret := l.lib.EventSetCreate()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("NVML event set: %v", ret)
	}
	e := &nvmlEvents{set: set, byUUID: make(map[nvml.Device]string, len(hs))}
	const wanted = nvml.EventTypeXidCriticalError | nvml.EventTypeDoubleBitEccError
	for i, h := range hs {
		if h == nil {
			continue // no handle: the GPU's probe tells its health
		}
		e.byUUID[h] = devs[i].UUID
		supported, ret := h.GetSupportedEventTypes()
		if ret != nvml.SUCCESS {
			continue // events unsupported: the probe tells its health
		}
		// A GPU that cannot register (lost) is left out: its probe fails.
		_ = h.RegisterEvents(wanted&supported, set)
	}
	return e, nil
}

func (e *nvmlEvents) Wait(timeoutMs uint32) (Event, error) {
	data, ret := e.set.Wait(timeoutMs)
	switch ret {
	case nvml.SUCCESS:
	case nvml.ERROR_TIMEOUT:
		return Event{}, ErrTimeout
	default:
		return Event{}, fmt.Errorf("NVML event wait: %v", ret)
	}
	ev := Event{XID: data.EventData}
	if data.EventType == nvml.EventTypeDoubleBitEccError {
		ev.XID = xidDoubleBitECC
	}
	if data.Device != nil {
		uuid, ok := e.byUUID[data.Device]
		if !ok {
			u, ret := data.Device.GetUUID()
			if ret != nvml.SUCCESS {
				return ev, nil // unknown device: treat as all GPUs
			}
			uuid = u
		}
		ev.UUID = uuid
	}
	return ev, nil
}

func (e *nvmlEvents) Close() { _ = e.set.Free() }
