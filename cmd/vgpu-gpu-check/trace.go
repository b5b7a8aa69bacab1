package main

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/compute"
)

// periodTrace writes what the node's controller saw and decided in every
// period of one share row, one line per tenant and period (tab-separated,
// a header first): what a row that missed on a GPU is read from afterwards,
// with no second run (device time is short). It is written from the
// controller's goroutine and closed once that has returned.
type periodTrace struct {
	f     *os.File
	w     *bufio.Writer
	start time.Time
	names map[string]string // tenant key -> its name in the row (index, workload, target)
	err   error
}

// openTrace creates dir/<group>-<row>.tsv; names maps each tenant's key to
// what the trace calls it.
func openTrace(dir string, r row, names map[string]string) (*periodTrace, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("trace directory: %w", err)
	}
	f, err := os.Create(filepath.Join(dir, traceFile(r)))
	if err != nil {
		return nil, fmt.Errorf("trace: %w", err)
	}
	t := &periodTrace{f: f, w: bufio.NewWriter(f), start: time.Now(), names: names}
	fmt.Fprintln(t.w, "t_s\tbusy\tperiod_ms\tclock_mhz\tlag_ms\tforeign\tfitted\ttenant\ttarget\tlent\tmeasured\tcost_ns\tcalibrated\tunits\trate_per_s\tmode\tslot_us\tconfine")
	return t, nil
}

// traceFile names a row's trace: its group and name, letters, digits and
// dashes only.
func traceFile(r row) string {
	s := strings.Map(func(c rune) rune {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
			return c
		}
		return '-'
	}, r.Group+"-"+r.Name)
	for strings.Contains(s, "--") {
		s = strings.ReplaceAll(s, "--", "-")
	}
	return strings.Trim(s, "-") + ".tsv"
}

// observe writes one period (compute.Runner.Observe).
func (t *periodTrace) observe(o compute.Observation) {
	if t == nil || t.err != nil {
		return
	}
	at := time.Since(t.start).Seconds()
	for _, d := range o.Decisions {
		name := t.names[d.Key]
		if name == "" {
			name = d.Key
		}
		_, t.err = fmt.Fprintf(t.w, "%.3f\t%.4f\t%.1f\t%.0f\t%.1f\t%.4f\t%t\t%s\t%.4f\t%+.4f\t%.4f\t%.4g\t%t\t%.4g\t%.4g\t%d\t%d\t%t\n",
			at, o.Busy, float64(o.Period)/float64(time.Millisecond), o.ClockMHz, float64(o.Lag)/float64(time.Millisecond), o.Foreign, o.Fitted, name,
			d.Share, d.Lent, d.Measured, d.Cost, d.Calibrated, d.Units, d.Control.Rate*1e9, d.Control.Mode, d.Control.Slot.LenUs, d.Control.Slot.Confine)
	}
}

// close flushes and closes the file; the first error of the trace.
func (t *periodTrace) close() error {
	if t == nil {
		return nil
	}
	if err := t.w.Flush(); t.err == nil {
		t.err = err
	}
	if err := t.f.Close(); t.err == nil {
		t.err = err
	}
	return t.err
}
