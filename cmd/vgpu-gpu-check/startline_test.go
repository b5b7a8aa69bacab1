package main

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"
)

// The start line opens when every tenant is ready, when one has ended (it
// never will be), or after its wait (programs without it: noted); never
// while a tenant is still setting up.
func TestStartLine(t *testing.T) {
	touch := func(l *startLine, i int) {
		for _, kv := range l.env(i) {
			if k, v, _ := strings.Cut(kv, "="); k == "VGPU_CHECK_READY" {
				if err := os.WriteFile(v, nil, 0o644); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	startFile := func(l *startLine) string {
		for _, kv := range l.env(0) {
			if k, v, _ := strings.Cut(kv, "="); k == "VGPU_CHECK_START" {
				return v
			}
		}
		t.Fatal("no VGPU_CHECK_START in the tenant's environment")
		return ""
	}
	tests := []struct {
		name      string
		ready     []int // tenants that set up, of 2
		exit      bool  // a tenant ends before the line opens
		wait      time.Duration
		wantStart bool
		wantNote  string
	}{
		{name: "every tenant ready", ready: []int{0, 1}, wait: time.Minute, wantStart: true},
		{name: "one still setting up: held", ready: []int{1}, wait: time.Minute},
		{name: "a tenant ended before it was ready", ready: []int{0}, exit: true, wait: time.Minute, wantStart: true},
		{name: "programs without the line: started after the wait, noted", wait: 50 * time.Millisecond, wantStart: true,
			wantNote: "tenants not at the start line after 50ms"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l, err := newStartLine(t.TempDir(), 2)
			if err != nil {
				t.Fatal(err)
			}
			defer l.remove()
			l.wait = tc.wait
			for _, i := range tc.ready {
				touch(l, i)
			}
			exited := make(chan struct{})
			if tc.exit {
				close(exited)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
			defer cancel()
			l.watch(ctx, exited)
			_, err = os.Stat(startFile(l))
			started := false
			select {
			case <-l.begun:
				started = true
			default:
			}
			if started != tc.wantStart || (err == nil) != tc.wantStart {
				t.Errorf("started %v (start file: %v), want %v", started, err, tc.wantStart)
			}
			if got := l.note(); !strings.HasPrefix(got, tc.wantNote) || (tc.wantNote == "") != (got == "") {
				t.Errorf("note %q, want %q", got, tc.wantNote)
			}
		})
	}
}
