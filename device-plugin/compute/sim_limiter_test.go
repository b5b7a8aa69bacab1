package compute

// The simulation's model of libvcuda's launch admission (vcuda/src/compute.c,
// node.c): what a tenant's launching thread does at each step.

import (
	"testing"
	"time"

	"github.com/volcano-vgpu/volcano-vgpu/api"
)

// step is the tenant's launching thread and limiter at now; a kernel
// launched now runs speed times as fast as at full load (power-capped
// clocks: simGPU.speed).
func (tn *simTenant) step(t *testing.T, now time.Duration, speed float64) {
	if tn.rewind && tn.launched > 0 && now%time.Second < simStep {
		tn.launched = 0 // the tampering tenant writes its report back to zero
	}
	// libvcuda adds a launch's cost to the report first, then waits until the
	// allowance covers the counter (compute.c: launches in the order they added)
	if tn.prog.batch > 0 && tn.inBatch >= tn.prog.batch {
		if len(tn.queue) > 0 {
			return // in a synchronize: nothing launched, nothing to report
		}
		tn.inBatch = 0
	}
	for now >= tn.nextLaunch && len(tn.queue) < tn.prog.depth && (tn.prog.batch == 0 || tn.inBatch < tn.prog.batch) {
		if !tn.waiting {
			tn.launched += tn.prog.units
		}
		if tn.owned && (tn.waiting && now < tn.wakeAt || !tn.admit(now)) {
			if !tn.waiting {
				tn.waits++
				tn.waiting = true
			}
			break
		}
		tn.waiting = false
		m := tn.prog.memBound
		tn.queue = append(tn.queue, time.Duration(float64(tn.prog.kernel)*(m+(1-m)/speed)))
		tn.admitted += tn.prog.units
		tn.enq++
		if tn.nsPerUnit > 0 && float64(tn.admitted-tn.evUnits)*tn.nsPerUnit >= float64(simEventEvery) {
			tn.record()
		}
		tn.nextLaunch = now + tn.prog.hostGap
		tn.inBatch++
	}
	if tn.owned {
		api.WriteUsage(tn.useMap, 0, api.UsageDevice{Launched: tn.launched, Waits: tn.waits})
	}
}

// simQuantum is libvcuda's VC_QUANTUM_NS (compute.c): a held-back launch
// sleeps until the allowance covers it and that much of its rate more,
// where that much holds two launches or more.
const simQuantum = 5 * time.Millisecond

// admit: the limiter's rule (vcuda/src/compute.c, node.c) on the node's
// published control; a refused launch sets when it wakes to look again.
func (tn *simTenant) admit(now time.Duration) bool {
	{
		c, seq := api.ReadControl(tn.ctlMap, 0)
		if seq != tn.lastSeq {
			tn.lastSeq, tn.seen, tn.staleAt = seq, now, 0
		}
		tn.ctlImage = c
	}
	c := tn.ctlImage
	if tn.lastSeq == 0 || c.Mode == api.ControlNone {
		return true // no decision yet: the local sampler (not modelled: it admits)
	}
	stale := max(time.Duration(c.PeriodUs)*time.Microsecond*api.ControlStalePeriods, 500*time.Millisecond)
	if now >= tn.seen+stale { // the node stopped answering: its fallback rate from what was used
		if c.Fallback <= 0 {
			return true
		}
		if tn.staleAt == 0 {
			tn.staleAt, tn.staleBase = now, tn.launched-tn.prog.units
		}
		return tn.covered(now, tn.staleBase+uint64(c.Fallback*float64(now-tn.staleAt)), c.Fallback)
	}
	if c.Mode == api.ControlUnlimited {
		return true
	}
	slot := c.Slot
	if tn.noSlots {
		slot = api.Slot{}
	}
	// with a slot, the credit of a slot period comes at once, at the slot's
	// start
	at := now
	if slot.PeriodUs > 0 && c.Rate > 0 {
		at = slotNext(now, slot)
	}
	dt := float64(min(int64(at)-int64(c.StampNs), 2000*int64(c.PeriodUs)))
	allowed := uint64(max(float64(c.Allowance)+c.Rate*dt, 0))
	if tn.launched > allowed && slot.PeriodUs > 0 && c.Rate > 0 {
		tn.wakeAt = min(slotNext(now, slot), now+20*time.Millisecond)
		return false
	}
	if !tn.covered(now, allowed, c.Rate) {
		return false
	}
	// a confining slot: nothing launched after its end, until the next start
	tn.nsPerUnit = 0
	if slot.Confine && slot.PeriodUs > 0 && c.Rate > 0 {
		next := slotNext(now, slot)
		end := next - time.Duration(slot.PeriodUs-slot.LenUs)*time.Microsecond
		if now >= end {
			tn.wakeAt = min(next, now+20*time.Millisecond)
			return false
		}
		if tn.bounded && !tn.queueFits(now, end, c.Cost) {
			return false
		}
	}
	return true
}

// simEventEvery: in a confining slot the limiter records an event on the
// launch's stream after about this much of its work, and learns what of
// its queue has run from those that completed (queue.c VC_EVENT_NS).
const simEventEvery = time.Millisecond

// simQueueAhead: how much of its work (at the node's cost) a tenant keeps
// queued in a confining slot (queue.c VC_AHEAD_NS); a held launch looks
// again after simQueuePoll at most (VC_POLL_NS).
const (
	simQueueAhead = 4 * time.Millisecond
	simQueuePoll  = time.Millisecond
)

type simEvent struct{ kernel, units uint64 }

// record: an event after the kernels queued so far.
func (tn *simTenant) record() {
	tn.events = append(tn.events, simEvent{kernel: tn.enq, units: tn.admitted})
	tn.evUnits = tn.admitted
}

// queueFits: in a confining slot, whether a launch goes on: while the
// tenant's queue (at the node's cost, what it launched since the last event
// seen complete, less what ran since it was seen) is over simQueueAhead or
// would not drain before the slot's end, it waits, an event recorded after
// what it queued (queue.c vc_queue_wait).
func (tn *simTenant) queueFits(now, end time.Duration, cost float64) bool {
	if cost <= 0 {
		return true
	}
	tn.nsPerUnit = cost
	for len(tn.events) > 0 && tn.events[0].kernel <= tn.deq {
		tn.drained, tn.drainedAt = tn.events[0].units, now
		tn.events = tn.events[1:]
	}
	if tn.admitted <= tn.drained {
		return true
	}
	// the oldest chunk not seen complete has been running since the last
	// one was seen, for as long as it is
	chunk := tn.admitted - tn.drained
	if len(tn.events) > 0 {
		chunk = tn.events[0].units - tn.drained
	}
	ran := min(now-tn.drainedAt, time.Duration(float64(chunk)*cost))
	back := time.Duration(float64(tn.admitted-tn.drained)*cost) - ran
	switch {
	case back <= 0:
		return true
	case now+back > end:
		tn.wakeAt = min(end, now+simQueuePoll)
	case back > simQueueAhead:
		tn.wakeAt = now + min(max(back-simQueueAhead, 20*time.Microsecond), simQueuePoll)
	default:
		return true
	}
	if tn.evUnits < tn.admitted {
		tn.record()
	}
	return false
}

// covered: whether allowed covers the launched counter. If not, a launch
// the quantum's credit holds twice over sleeps past catching up by the
// quantum (compute.c admit_wait); others look again every step (the
// limiter sleeps until it catches up, at least 20 µs: about the same).
func (tn *simTenant) covered(now time.Duration, allowed uint64, rate float64) bool {
	if tn.launched <= allowed {
		return true
	}
	if rate > 0 && float64(tn.prog.units) < rate*float64(simQuantum)/2 {
		w := time.Duration(float64(tn.launched-allowed)/rate) + simQuantum
		tn.wakeAt = now + min(w, 20*time.Millisecond)
	}
	return false
}

// slotNext is the slot's next start after now (node.c vc_node_slot_next).
func slotNext(now time.Duration, s api.Slot) time.Duration {
	P := time.Duration(s.PeriodUs) * time.Microsecond
	into := ((now%P - time.Duration(s.StartUs)*time.Microsecond) + P) % P
	return now + P - into
}
