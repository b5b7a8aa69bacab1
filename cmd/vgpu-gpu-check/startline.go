package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// startLine holds a row's tenants, set up, until every one of them is: each
// program (burn, elem) creates its ready file (VGPU_CHECK_READY) and waits
// for the start file (VGPU_CHECK_START). Imports differ by seconds (PyTorch
// 3-5 s, the probe under one), and a tenant that ran its measured half
// before the others had started measured the GPU alone: rows of unlimited
// tenants, which measure what the GPU gives tenants that run at once, read
// nothing without it.
type startLine struct {
	dir   string
	n     int
	wait  time.Duration // the longest it holds the tenants (programs without a start line)
	begun chan struct{} // closed at the start
	once  sync.Once
	late  bool // started on wait, not on every tenant's ready file
}

// newStartLine makes the line's folder under work for n tenants.
func newStartLine(work string, n int) (*startLine, error) {
	dir, err := os.MkdirTemp(work, "start-")
	if err != nil {
		return nil, fmt.Errorf("a start line for the row's tenants: %w", err)
	}
	return &startLine{dir: dir, n: n, wait: 60 * time.Second, begun: make(chan struct{})}, nil
}

// env is tenant i's environment for the line.
func (l *startLine) env(i int) []string {
	return []string{"VGPU_CHECK_READY=" + filepath.Join(l.dir, fmt.Sprintf("ready.%d", i)),
		"VGPU_CHECK_START=" + filepath.Join(l.dir, "start")}
}

// watch starts the tenants once every one is ready, a tenant has ended
// (exited: it will never be), or wait has passed; it returns then, or
// when ctx ends.
func (l *startLine) watch(ctx context.Context, exited <-chan struct{}) {
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	timeout := time.After(l.wait)
	for {
		if l.ready() == l.n {
			l.start()
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-exited:
			l.start()
			return
		case <-timeout:
			l.late = true
			l.start()
			return
		case <-t.C:
		}
	}
}

func (l *startLine) ready() int {
	n := 0
	for i := range l.n {
		if _, err := os.Stat(filepath.Join(l.dir, fmt.Sprintf("ready.%d", i))); err == nil {
			n++
		}
	}
	return n
}

func (l *startLine) start() {
	l.once.Do(func() {
		_ = os.WriteFile(filepath.Join(l.dir, "start"), nil, 0o644)
		close(l.begun)
	})
}

// note says when the line did not hold: "" when it did.
func (l *startLine) note() string {
	if !l.late {
		return ""
	}
	return fmt.Sprintf("tenants not at the start line after %s: started as they came (a program without VGPU_CHECK_READY?)", l.wait)
}

func (l *startLine) remove() { _ = os.RemoveAll(l.dir) }

// after runs f once the line has started, unless ctx ends first.
func (l *startLine) after(ctx context.Context, f func()) {
	select {
	case <-ctx.Done():
	case <-l.begun:
		f()
	}
}

// together runs f for each of n tenants at once, starts them from the line
// (once every one is ready, or one has ended) and returns each one's error.
func (l *startLine) together(ctx context.Context, n int, f func(i int) error) []error {
	errs := make([]error, n)
	exited := make(chan struct{})
	var once sync.Once
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer once.Do(func() { close(exited) })
			errs[i] = f(i)
		}()
	}
	l.watch(ctx, exited)
	wg.Wait()
	return errs
}
