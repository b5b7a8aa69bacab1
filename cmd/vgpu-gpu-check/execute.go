package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"
)

type status string

const (
	statusOK      status = "ok"
	statusMiss    status = "MISS"         // a share outside ±3 points
	statusOver    status = "OVER THE CAP" // a memory path got past the cap
	statusEarly   status = "refused early"
	statusError   status = "ERROR"
	statusTimeout status = "TIMEOUT"
	statusSkipped status = "skipped"
)

// tolerance of a share, in points of the GPU (issue 22's goal).
const tolerance = 3.0

// result is what one row measured.
type result struct {
	Target, Achieved string
	Status           status
	Note             string
	ContextMiB       uint64    // context rows
	AbsErr           []float64 // share rows with fixed tenants: |achieved - target| per tenant
	// GPUTime: share rows, the GPU time over the second half, percent
	// (rowGPUTime; empty without readings): a lone tenant's is the
	// device's mean busy figure, one program's tenants' that figure split
	// by their rates (splitByRate), one per tenant; a mix of programs'
	// holds the device's figure alone. What the limiter holds.
	GPUTime []float64
}

// outcome is a row with its result, as the table prints it.
type outcome struct {
	row
	result
	Took time.Duration
}

// errUnavailable marks a row whose program is not on this machine; the row is
// reported as skipped.
var errUnavailable = errors.New("not available here")

// executor runs rows one after another under a total deadline, each under
// its own timeout.
type executor struct {
	deadline time.Time     // of the whole run
	timeout  time.Duration // of one row
	now      func() time.Time
	run      func(ctx context.Context, r row) (result, error)
}

// execute runs rows in order and hands each outcome to emit as it ends. A row
// cut by its timeout (or by the total deadline) is TIMEOUT; a row whose
// planned time no longer fits before the deadline is skipped, as are all rows
// once ctx is done.
func (e executor) execute(ctx context.Context, rows []row, emit func(outcome)) []outcome {
	outs := make([]outcome, 0, len(rows))
	for _, r := range rows {
		o := e.one(ctx, r)
		outs = append(outs, o)
		if emit != nil {
			emit(o)
		}
	}
	return outs
}

func (e executor) one(ctx context.Context, r row) outcome {
	o := outcome{row: r, result: result{Target: "-", Achieved: "-"}}
	left := e.deadline.Sub(e.now())
	switch {
	case r.Skip != "":
		o.Status, o.Note = statusSkipped, r.Skip
		return o
	case left < r.Budget:
		o.Status, o.Note = statusSkipped, fmt.Sprintf("total deadline near: %s left, row planned at %s (raise -deadline)", round(max(left, 0)), r.Budget)
		return o
	case ctx.Err() != nil:
		o.Status, o.Note = statusSkipped, "run stopped: "+context.Cause(ctx).Error()
		return o
	}
	limit := min(e.timeout, left)
	rctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	start := e.now()
	res, err := e.run(rctx, r)
	o.Took = e.now().Sub(start)
	res.Target, res.Achieved = orDash(res.Target), orDash(res.Achieved)
	o.result = res
	switch {
	case errors.Is(rctx.Err(), context.DeadlineExceeded):
		o.Status, o.Note = statusTimeout, fmt.Sprintf("cut after %s (-scenario-timeout %s, %s left of -deadline)", round(limit), e.timeout, round(left))
	case err != nil && ctx.Err() != nil:
		o.Status, o.Note = statusError, "run stopped during the row: "+context.Cause(ctx).Error()
	case errors.Is(err, errUnavailable):
		o.Status, o.Note = statusSkipped, err.Error()
	case err != nil:
		o.Status, o.Note = statusError, err.Error()
	case o.Status == "":
		o.Status = statusOK
	}
	if o.Status == statusTimeout || o.Status == statusSkipped || o.Status == statusError {
		o.Achieved = "-" // what a cut or failed row read is no measurement
	}
	return o
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func round(d time.Duration) time.Duration { return d.Round(100 * time.Millisecond) }

// memoryVerdict judges what a path allocated under capMiB in 1 GiB chunks:
// over the cap is a failure, stopping more than one chunk short of it too.
func memoryVerdict(capMiB, got uint64, refused bool) (status, string) {
	switch {
	case got > capMiB:
		return statusOver, fmt.Sprintf("held %d MiB past the cap", got-capMiB)
	case !refused:
		return statusError, "the loop ended before any refusal (raise -scenario-timeout, or free GPU memory)"
	case got+1024 < capMiB:
		return statusEarly, fmt.Sprintf("refused %d MiB below the cap", capMiB-got)
	}
	return statusOK, ""
}

// shareVerdict judges achieved shares (percent of solo) against the tenants'
// targets: a fixed tenant within ±3 points, a balance tenant at least its
// target less 3 (it may take what the others leave). Unlimited tenants have
// no target: the note gives what they got together (a measurement, ok).
func shareVerdict(ts []tenantSpec, got []float64) (result, error) {
	if len(got) != len(ts) {
		return result{}, fmt.Errorf("%d results for %d tenants", len(got), len(ts))
	}
	r := result{Target: targets(ts), Status: statusOK}
	ach := make([]string, len(got))
	var notes []string
	var free float64
	unlimited := 0
	for i, t := range ts {
		ach[i] = fmt.Sprintf("%.1f", got[i])
		if t.Unlimited {
			free += got[i]
			unlimited++
			continue
		}
		d := got[i] - float64(t.Cores)
		if t.Balance {
			if d < -tolerance {
				r.Status = statusMiss
			}
			notes = append(notes, fmt.Sprintf("b%+.1f", d))
			continue
		}
		r.AbsErr = append(r.AbsErr, math.Abs(d))
		if math.Abs(d) > tolerance {
			r.Status = statusMiss
		}
		notes = append(notes, fmt.Sprintf("%+.1f", d))
	}
	if unlimited > 1 {
		notes = append(notes, fmt.Sprintf("together %.1f (of their solo rates; what the GPU gives tenants that run at once)", free))
	}
	r.Achieved = strings.Join(ach, "+")
	r.Note = strings.Join(notes, " ")
	return r, nil
}
