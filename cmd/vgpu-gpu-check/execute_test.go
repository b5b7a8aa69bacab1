package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// fakeClock advances only when a row says it ran.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time { return c.t }

func TestExecute(t *testing.T) {
	t0 := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	type step struct {
		takes time.Duration // fake time the row takes
		block bool          // run until its context ends
		res   result
		err   error
	}
	type want struct {
		status status
		note   string // substring
	}
	for _, tc := range []struct {
		name    string
		total   time.Duration
		timeout time.Duration
		rows    []row
		steps   map[string]step
		cancel  string // cancel the run's context after this row
		want    []want
	}{
		{name: "rows that finish keep their own verdict; a clean result is ok",
			total: time.Minute, timeout: 10 * time.Second,
			rows:  []row{{Name: "a", Budget: time.Second}, {Name: "b", Budget: time.Second}},
			steps: map[string]step{"a": {takes: time.Second}, "b": {takes: time.Second, res: result{Status: statusMiss, Note: "+5.0"}}},
			want:  []want{{statusOK, ""}, {statusMiss, "+5.0"}}},
		{name: "a row that overruns its timeout is cut and reads TIMEOUT; the next row still runs",
			total: time.Hour, timeout: 20 * time.Millisecond,
			rows:  []row{{Name: "hang", Budget: time.Second}, {Name: "next", Budget: time.Second}},
			steps: map[string]step{"hang": {block: true}, "next": {takes: time.Second}},
			want:  []want{{statusTimeout, "cut after"}, {statusOK, ""}}},
		{name: "the rest of the deadline bounds a row below its timeout",
			total: 200 * time.Millisecond, timeout: time.Hour,
			rows:  []row{{Name: "hang", Budget: 10 * time.Millisecond}},
			steps: map[string]step{"hang": {block: true}},
			want:  []want{{statusTimeout, "cut after 200ms (-scenario-timeout 1h0m0s, 200ms left of -deadline)"}}},
		{name: "rows that no longer fit before the deadline are skipped, smaller ones still run",
			total: 50 * time.Second, timeout: time.Minute,
			rows:  []row{{Name: "a", Budget: 30 * time.Second}, {Name: "big", Budget: 30 * time.Second}, {Name: "small", Budget: 5 * time.Second}, {Name: "big2", Budget: 30 * time.Second}},
			steps: map[string]step{"a": {takes: 40 * time.Second}, "small": {takes: 5 * time.Second}},
			// 50 s - 40 s = 10 s left: big (30 s) skipped, small (5 s) runs, then 5 s left: big2 skipped
			want: []want{{statusOK, ""}, {statusSkipped, "total deadline near: 10s left, row planned at 30s"}, {statusOK, ""}, {statusSkipped, "5s left"}}},
		{name: "a program missing here skips its row; a failure reads ERROR",
			total: time.Minute, timeout: 10 * time.Second,
			rows: []row{{Name: "cupy", Budget: time.Second}, {Name: "broken", Budget: time.Second}},
			steps: map[string]step{"cupy": {err: fmt.Errorf("cupy: python3 cannot import it: %w", errUnavailable)},
				"broken": {res: result{Achieved: "0 MiB"}, err: errors.New("exit status 1: Segmentation fault")}},
			want: []want{{statusSkipped, "cannot import"}, {statusError, "Segmentation fault"}}},
		{name: "a row planned out of reach is skipped without running",
			total: time.Minute, timeout: 10 * time.Second,
			rows:  []row{{Name: "mixed", Budget: time.Second, Skip: "probe is not in -use"}},
			steps: map[string]step{},
			want:  []want{{statusSkipped, "probe is not in -use"}}},
		{name: "once the run is stopped every remaining row is skipped",
			total: time.Minute, timeout: 10 * time.Second, cancel: "a",
			rows:  []row{{Name: "a", Budget: time.Second}, {Name: "b", Budget: time.Second}, {Name: "c", Budget: time.Second}},
			steps: map[string]step{"a": {takes: time.Second}},
			want:  []want{{statusOK, ""}, {statusSkipped, "run stopped"}, {statusSkipped, "run stopped"}}},
		{name: "a row the run's stop cuts says so",
			total: time.Minute, timeout: 10 * time.Second, cancel: "a",
			rows:  []row{{Name: "a", Budget: time.Second}, {Name: "b", Budget: time.Second}},
			steps: map[string]step{"a": {block: true}},
			want:  []want{{statusError, "run stopped during the row: context canceled"}, {statusSkipped, "run stopped"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := &fakeClock{t: t0}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var ran []string
			e := executor{deadline: t0.Add(tc.total), timeout: tc.timeout, now: clock.now,
				run: func(ctx context.Context, r row) (result, error) {
					ran = append(ran, r.Name)
					s, ok := tc.steps[r.Name]
					if !ok {
						t.Errorf("row %q ran; it should not have", r.Name)
					}
					if s.block {
						if r.Name == tc.cancel {
							cancel()
						}
						<-ctx.Done()
						return result{}, ctx.Err()
					}
					clock.t = clock.t.Add(s.takes)
					if r.Name == tc.cancel {
						cancel()
					}
					return s.res, s.err
				}}
			var emitted int
			outs := e.execute(ctx, tc.rows, func(outcome) { emitted++ })
			if emitted != len(tc.rows) || len(outs) != len(tc.rows) {
				t.Fatalf("%d emitted, %d outcomes for %d rows", emitted, len(outs), len(tc.rows))
			}
			for i, w := range tc.want {
				o := outs[i]
				if o.Status != w.status || !strings.Contains(o.Note, w.note) {
					t.Errorf("row %q: %s %q, want %s with %q", o.Name, o.Status, o.Note, w.status, w.note)
				}
				if (o.Status == statusSkipped || o.Status == statusError || o.Status == statusTimeout) && o.Achieved != "-" {
					t.Errorf("row %q: %s but achieved %q; a failed row measured nothing", o.Name, o.Status, o.Achieved)
				}
				if o.Status == statusSkipped && o.Took != 0 {
					t.Errorf("row %q skipped but took %v", o.Name, o.Took)
				}
			}
			if s, ok := tc.steps[tc.rows[0].Name]; ok && !s.block && outs[0].Took != s.takes {
				t.Errorf("row %q took %v on the fake clock, want %v", outs[0].Name, outs[0].Took, s.takes)
			}
		})
	}
}

func TestMemoryVerdict(t *testing.T) {
	for _, tc := range []struct {
		name         string
		capMiB, got  uint64
		refused      bool
		want         status
		wantNoteLike string
	}{
		{"held at the cap", 8192, 8192, true, statusOK, ""},
		{"expandable segments stop one granule short: still ok", 8192, 7168, true, statusOK, ""},
		{"past the cap", 8192, 9216, false, statusOver, "1024 MiB past the cap"},
		{"refused well below the cap", 8192, 4096, true, statusEarly, "4096 MiB below"},
		{"the loop ran out of count or time without a refusal", 8192, 8192, false, statusError, "before any refusal"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, note := memoryVerdict(tc.capMiB, tc.got, tc.refused)
			if got != tc.want || !strings.Contains(note, tc.wantNoteLike) {
				t.Errorf("memoryVerdict = %s %q, want %s with %q", got, note, tc.want, tc.wantNoteLike)
			}
		})
	}
}

func TestShareVerdict(t *testing.T) {
	for _, tc := range []struct {
		name string
		ts   []tenantSpec
		got  []float64
		want result
	}{
		{name: "within 3 points each", // 30.2-30 = +0.2, 57.6-60 = -2.4
			ts: []tenantSpec{{Work: "pytorch", Cores: 30}, {Work: "pytorch", Cores: 60}}, got: []float64{30.2, 57.6},
			want: result{Target: "30+60", Achieved: "30.2+57.6", Status: statusOK, Note: "+0.2 -2.4", AbsErr: []float64{0.2, 2.4}}},
		{name: "one tenant off by more than 3 misses", // 0.04-30 = -30.0
			ts: []tenantSpec{{Work: "pytorch", Cores: 30}, {Work: "pytorch", Cores: 60}}, got: []float64{0.04, 71.7},
			want: result{Target: "30+60", Achieved: "0.0+71.7", Status: statusMiss, Note: "-30.0 +11.7", AbsErr: []float64{29.96, 11.7}}},
		{name: "a balance tenant may take more than its target", // 48.5-30 = +18.5
			ts: []tenantSpec{{Work: "pytorch", Cores: 50}, {Work: "pytorch", Cores: 30, Balance: true}}, got: []float64{50.5, 48.5},
			want: result{Target: "50+b30", Achieved: "50.5+48.5", Status: statusOK, Note: "+0.5 b+18.5", AbsErr: []float64{0.5}}},
		{name: "a balance tenant starved below its target misses", // 20-30 = -10
			ts: []tenantSpec{{Work: "pytorch", Cores: 50}, {Work: "pytorch", Cores: 30, Balance: true}}, got: []float64{50, 20},
			want: result{Target: "50+b30", Achieved: "50.0+20.0", Status: statusMiss, Note: "+0.0 b-10.0", AbsErr: []float64{0}}},
		{name: "unlimited tenants have no target: what they got together is noted, never a miss",
			ts: []tenantSpec{{Work: "pytorch", Unlimited: true}, {Work: "probe-elem", Unlimited: true}}, got: []float64{45.9, 30.2},
			want: result{Target: "none+none", Achieved: "45.9+30.2", Status: statusOK,
				Note: "together 76.1 (of their solo rates; what the GPU gives tenants that run at once)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := shareVerdict(tc.ts, tc.got)
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tc.want, got, cmp.Comparer(func(a, b float64) bool { return a-b < 1e-9 && b-a < 1e-9 })); d != "" {
				t.Errorf("shareVerdict (-want +got):\n%s", d)
			}
		})
	}
	if _, err := shareVerdict([]tenantSpec{{Cores: 10}}, nil); err == nil {
		t.Error("shareVerdict with no result for its tenant: no error")
	}
}
