package compute

import (
	"math"
	"testing"
	"time"
)

// TestSimQueueBound: libvcuda's queue bound (vcuda/src/queue.c). Where
// queues are deep (a training loop that never synchronizes) the confining
// slots do not confine: at a slot's start a tenant launches its whole
// period's credit, the GPU is still running the other's spill, so its own
// queue runs past its slot's end, and the pair time-slices as unconfined
// (each about 46.6 at 50 + 50, the switches' loss; the probe beside such a
// PyTorch at 50 + 50 45.0, simulated H200). Bounded (events every
// millisecond of work tell the limiter what of its queue has run; at the
// node's cost it keeps at most 4 ms queued and none past the slot's end)
// each tenant's work stays in its slot; simOptions.unboundQueue is the
// limiter before. The rows here hold ± 3
// bounded and missed unbounded, or held both ways.
func TestSimQueueBound(t *testing.T) {
	deep := simTorchDeep
	tests := []struct {
		name      string
		a, b      simTenant
		unbounded bool // missed unbounded
	}{
		{name: "one program 50 + 50, 64 queued", a: simT("a", 50, deep(64)), b: simT("b", 50, deep(64)), unbounded: true},
		{name: "one program 50 + 50, 128 queued", a: simT("a", 50, deep(128)), b: simT("b", 50, deep(128)), unbounded: true},
		{name: "one program 45 + 50, 300 queued", a: simT("a", 45, deep(300)), b: simT("b", 50, deep(300))},
		{name: "pytorch 50, 64 queued + probe 50", a: simT("a", 50, deep(64)), b: simT("b", 50, simProbe), unbounded: true},
		// the probe got 46.3 (bounded) while the fit kept the windows of
		// the full-load clock from before the split (TestRegressFarClock)
		{name: "pytorch 50, 128 queued + probe 50", a: simT("a", 50, deep(128)), b: simT("b", 50, simProbe)},
		{name: "pytorch 50, 64 queued + pytorch 50", a: simT("a", 50, deep(64)), b: simT("b", 50, simTorch)},
		{name: "pytorch 30, 64 queued + probe 60", a: simT("a", 30, deep(64)), b: simT("b", 60, simProbe)},
		{name: "pytorch 60, 64 queued + probe 30", a: simT("a", 60, deep(64)), b: simT("b", 30, simProbe)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, bound := range []bool{false, true} {
				o := simH200()
				o.unboundQueue = !bound
				got, _ := simulate(t, stretch([]simTenant{tt.a, tt.b}, 16.0/12), o)
				t.Logf("bounded %v: %s", bound, simString(got))
				miss := math.Abs(got["a"]-float64(tt.a.cores)) > 3 || math.Abs(got["b"]-float64(tt.b.cores)) > 3
				switch {
				case bound && miss:
					t.Errorf("bounded: %s, want %d + %d ± 3", simString(got), tt.a.cores, tt.b.cores)
				case !bound && tt.unbounded && !miss:
					t.Errorf("unbounded: %s held ± 3; the case no longer shows the spill", simString(got))
				}
			}
		})
	}
}

// TestSimDeepBesideProbe: the probe beside a PyTorch that never
// synchronizes, with the device's samples late and stamped at these phases
// of the driver's sample clock (simulated H200). The rows missed before the
// fix each names.
func TestSimDeepBesideProbe(t *testing.T) {
	tests := []struct {
		name         string
		a, b         simTenant
		delay, phase time.Duration
	}{
		// A refill: PyTorch refilled its queue after the loop's back-off,
		// and the window it did so in (a third more launched than ran)
		// led the fit for seconds where its units stood apart from the
		// others' (TestRegressFill; leaveOutFills). 67.2 + 26.2 and 67.4 +
		// 25.8 before (PyTorch's cost read 629 ns per unit for about 700);
		// the third split at 8.5 s, 53.5 + 33.6.
		{name: "refill: pytorch 60, 64 queued + probe 30, 20 ms late", a: simT("a", 60, simTorchDeep(64)), b: simT("b", 30, simProbe), delay: 20 * time.Millisecond, phase: 37 * time.Millisecond},
		{name: "refill: the same, a later phase", a: simT("a", 60, simTorchDeep(64)), b: simT("b", 30, simProbe), delay: 20 * time.Millisecond, phase: 113 * time.Millisecond},
		{name: "refill: pytorch 50, 64 queued + probe 50, 5 ms late", a: simT("a", 50, simTorchDeep(64)), b: simT("b", 50, simProbe), delay: 5 * time.Millisecond, phase: 113 * time.Millisecond},
		// A windup: the probe split off as a sliver is taken at the floor
		// (a twentieth of the pooled cost) and the fit's next costs bring
		// it down to its own within a second; its rates lagged them, its
		// allowance held it below its share, and its integral wound up to
		// the limit, from which it ran over its share for seconds
		// (costMoved). 29.4 + 63.7, 29.4 + 63.6 and 63.4 + 29.6 before.
		{name: "windup: pytorch 30, 128 queued + probe 60, 5 ms late", a: simT("a", 30, simTorchDeep(128)), b: simT("b", 60, simProbe), delay: 5 * time.Millisecond},
		{name: "windup: pytorch 30, 256 queued + probe 60, 20 ms late", a: simT("a", 30, simTorchDeep(256)), b: simT("b", 60, simProbe), delay: 20 * time.Millisecond},
		{name: "windup: pytorch 60, 128 queued + probe 30, 60 ms late", a: simT("a", 60, simTorchDeep(128)), b: simT("b", 30, simProbe), delay: 60 * time.Millisecond, phase: 37 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := simH200()
			o.delay, o.phase = tt.delay, tt.phase
			got, _ := simulate(t, stretch([]simTenant{tt.a, tt.b}, 16.0/12), o)
			t.Logf("%s", simString(got))
			if math.Abs(got["a"]-float64(tt.a.cores)) > 3 || math.Abs(got["b"]-float64(tt.b.cores)) > 3 {
				t.Errorf("%s, want %d + %d ± 3", simString(got), tt.a.cores, tt.b.cores)
			}
		})
	}
}
