package mps

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/volcano-vgpu/volcano-vgpu/e2e/sim/mpsfake"
)

// The test binary doubles as the fake nvidia-cuda-mps-control.
const fakeEnv = "VGPU_TEST_FAKE_MPS_CONTROL"

func TestMain(m *testing.M) {
	if os.Getenv(fakeEnv) == "1" {
		os.Exit(mpsfake.Main(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// fakeControl makes the test binary answer as nvidia-cuda-mps-control.
func fakeControl(t *testing.T) string {
	t.Setenv(fakeEnv, "1")
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return self
}

// reports records the last health each GPU got.
type reports struct {
	mu   sync.Mutex
	last map[string]error
}

func (r *reports) report(uuid string, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.last == nil {
		r.last = map[string]error{}
	}
	r.last[uuid] = err
}

func (r *reports) get(uuid string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.last[uuid]
}

type modes struct{ calls []string }

func (m *modes) SetExclusive(uuid string, exclusive bool) error {
	v := "DEFAULT"
	if exclusive {
		v = "EXCLUSIVE_PROCESS"
	}
	m.calls = append(m.calls, uuid+"="+v)
	return nil
}

func newSupervisor(t *testing.T, root string, r *reports, m ComputeModes, uuids ...string) *Supervisor {
	cmd := fakeControl(t)
	s := &Supervisor{UID: 0, Interval: time.Second, Report: r.report, Modes: m}
	for _, u := range uuids {
		d := New(root, u, cmd, time.Minute) // each command execs this test binary: slow under -race
		s.Daemons = append(s.Daemons, d)
		t.Cleanup(func() { _ = d.Stop(context.Background()) })
	}
	return s
}

func serverPIDs(t *testing.T, d *Daemon) []int {
	t.Helper()
	servers, err := d.Servers(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, s := range servers {
		pids = append(pids, s.PID)
	}
	return pids
}

func TestSupervisorStartsAdoptsAndRecovers(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	r := &reports{}
	m := &modes{}
	s := newSupervisor(t, root, r, m, "GPU-a", "GPU-b")
	s.Start(ctx)
	a, b := s.Daemons[0], s.Daemons[1]
	for _, d := range s.Daemons {
		if err := r.get(d.UUID); err != nil {
			t.Fatalf("GPU %s after start: %v", d.UUID, err)
		}
		if _, err := os.Stat(filepath.Join(d.PipeDir(), mpsfake.SocketName)); err != nil {
			t.Errorf("GPU %s: no control socket in its pipe dir: %v", d.UUID, err)
		}
	}
	if d := cmp.Diff([]string{"GPU-a=EXCLUSIVE_PROCESS", "GPU-b=EXCLUSIVE_PROCESS"}, m.calls); d != "" {
		t.Errorf("compute modes (-want +got):\n%s", d)
	}
	outer := t
	first := serverPIDs(t, a)
	if len(first) != 1 {
		t.Fatalf("GPU-a servers = %v, want one started up front", first)
	}

	t.Run("a restarted plugin adopts the running daemon and server", func(t *testing.T) {
		again := newSupervisor(outer, root, r, nil, "GPU-a") // its cleanup must not stop GPU-a before the next cases
		adopted, err := again.Daemons[0].Start(ctx)
		if err != nil || !adopted {
			t.Fatalf("Start = adopted %v, %v; want the running daemon adopted", adopted, err)
		}
		again.Check(ctx)
		if err := r.get("GPU-a"); err != nil {
			t.Fatalf("GPU-a after adoption: %v", err)
		}
		if got := serverPIDs(t, a); !cmp.Equal(got, first) {
			t.Errorf("servers after adoption = %v, want the running %v kept", got, first)
		}
	})

	t.Run("a fatal client fault makes the GPU unhealthy until a fresh server answers", func(t *testing.T) {
		if _, err := a.Control(ctx, "fake_fault "+itoa(first[0])); err != nil {
			t.Fatal(err)
		}
		s.Check(ctx)
		err := r.get("GPU-a")
		if !errors.Is(err, ErrFault) || !strings.Contains(err.Error(), "fatal GPU exception") || Reason(err) != ReasonFault {
			t.Fatalf("GPU-a after a fault: %v (%s), want ErrFault quoting the log", err, Reason(err))
		}
		if err := r.get("GPU-b"); err != nil {
			t.Errorf("GPU-b, another daemon, after GPU-a's fault: %v", err)
		}
		s.Check(ctx) // its clients still attached: still unhealthy
		if !errors.Is(r.get("GPU-a"), ErrFault) {
			t.Fatalf("GPU-a while the faulted server runs: %v", r.get("GPU-a"))
		}
		if _, err := a.Control(ctx, "fake_server_exit "+itoa(first[0])+" 1"); err != nil {
			t.Fatal(err)
		}
		s.Check(ctx)
		if err := r.get("GPU-a"); err != nil {
			t.Fatalf("GPU-a after its faulted server exited: %v", err)
		}
		if got := serverPIDs(t, a); len(got) != 1 || got[0] == first[0] {
			t.Errorf("servers = %v, want one fresh server (not %d)", got, first[0])
		}
	})

	t.Run("a crashed daemon makes the GPU unhealthy, is started again, and the GPU recovers", func(t *testing.T) {
		_, _ = b.Control(ctx, "fake_crash")
		s.Check(ctx)
		if err := r.get("GPU-b"); !errors.Is(err, ErrNoAnswer) || Reason(err) != ReasonNoAnswer {
			t.Fatalf("GPU-b after a crash: %v (%s), want ErrNoAnswer", err, Reason(err))
		}
		s.Check(ctx)
		if err := r.get("GPU-b"); err != nil {
			t.Fatalf("GPU-b after its daemon was started again: %v", err)
		}
	})

	t.Run("a GPU that leaves MPS mode: daemon stopped, compute mode restored", func(t *testing.T) {
		m.calls = nil
		if err := Retire(ctx, root, map[string]bool{"GPU-a": true}, a.Command, a.Timeout, m); err != nil {
			t.Fatal(err)
		}
		if _, err := b.Control(ctx, "get_server_list"); !errors.Is(err, ErrNoAnswer) {
			t.Errorf("GPU-b's daemon still answers after Retire: %v", err)
		}
		if _, err := os.Stat(b.Dir); !os.IsNotExist(err) {
			t.Errorf("GPU-b's directory is left: %v", err)
		}
		if d := cmp.Diff([]string{"GPU-b=DEFAULT"}, m.calls); d != "" {
			t.Errorf("compute modes (-want +got):\n%s", d)
		}
		if _, err := a.Control(ctx, "get_server_list"); err != nil {
			t.Errorf("GPU-a, still MPS, was stopped: %v", err)
		}
	})
}

func TestSupervisorCannotStart(t *testing.T) {
	r := &reports{}
	s := &Supervisor{Report: r.report, Daemons: []*Daemon{New(t.TempDir(), "GPU-a", "/nonexistent/nvidia-cuda-mps-control", time.Second)}}
	s.Start(context.Background())
	err := r.get("GPU-a")
	if err == nil || !strings.Contains(err.Error(), "MPS control daemon cannot be started: GPU GPU-a (/nonexistent/nvidia-cuda-mps-control -d)") {
		t.Errorf("report = %v, want the start failure naming the command", err)
	}
	if got := Reason(err); got != ReasonStart {
		t.Errorf("Reason = %q, want %q", got, ReasonStart)
	}
}

func TestOtherUserIsPendingNotStarted(t *testing.T) {
	// The fake models the real daemon: a server of another user waits.
	ctx := context.Background()
	r := &reports{}
	s := newSupervisor(t, t.TempDir(), r, nil, "GPU-a")
	s.Start(ctx)
	d := s.Daemons[0]
	if _, err := d.StartServer(ctx, 1000); err == nil {
		t.Fatal("a server for user 1000 started while user 0's runs")
	}
	log, err := os.ReadFile(filepath.Join(d.LogDir(), ControlLog))
	if err != nil || !strings.Contains(string(log), "push client of user 1000 to pending list") {
		t.Errorf("control.log = %q, %v: want the pending line", log, err)
	}
	s.Check(ctx) // a pending client is logged, the GPU stays healthy for user 0
	if err := r.get("GPU-a"); err != nil {
		t.Errorf("GPU-a with a pending client: %v", err)
	}
}

func itoa(i int) string { return strconv.Itoa(i) }

// The server is held to the largest share booked on its GPU: a process that
// bypasses libvcuda and raises its own percentage gets no more than that.
func TestSupervisorCeiling(t *testing.T) {
	ctx := context.Background()
	r := &reports{}
	var booked uint32 = 30
	s := newSupervisor(t, t.TempDir(), r, nil, "GPU-a")
	s.Ceiling = func(string) uint32 { return booked }
	s.Start(ctx)
	d := s.Daemons[0]
	percent := func() string {
		pids := serverPIDs(t, d)
		if len(pids) != 1 {
			t.Fatalf("servers = %v", pids)
		}
		out, err := d.Control(ctx, "get_active_thread_percentage "+strconv.Itoa(pids[0]))
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(out)
	}
	steps := []struct {
		name string
		do   func()
		want string
	}{
		{name: "the fresh server is held to the booked 30%", do: func() {}, want: "30.0"},
		{name: "a 60% tenant about to start raises it at once", do: func() {
			if err := s.Hold(ctx, "GPU-a", 60); err != nil {
				t.Fatal(err)
			}
		}, want: "60.0"},
		{name: "an out-of-range hold changes nothing", do: func() { _ = s.Hold(ctx, "GPU-a", 0) }, want: "60.0"},
		{name: "the next check follows the bookings (the 60% tenant left)", do: func() { s.Check(ctx) }, want: "30.0"},
		{name: "no booking: 100%", do: func() { booked = 0; s.Check(ctx) }, want: "100.0"},
		{name: "a fresh server after a fault gets the ceiling too", do: func() {
			booked = 40
			pid := serverPIDs(t, d)[0]
			_, _ = d.Control(ctx, "fake_fault "+strconv.Itoa(pid))
			_, _ = d.Control(ctx, "fake_server_exit "+strconv.Itoa(pid)+" 1")
			s.Check(ctx)
		}, want: "40.0"},
	}
	for _, st := range steps {
		st.do()
		if got := percent(); got != st.want {
			t.Errorf("%s: server percentage %s, want %s", st.name, got, st.want)
		}
		if held := strconv.FormatUint(uint64(s.Held("GPU-a")), 10) + ".0"; held != st.want {
			t.Errorf("%s: Held = %s, want %s (what the server was set to)", st.name, held, st.want)
		}
	}
	if h := s.Held("GPU-b"); h != 0 {
		t.Errorf("Held of a GPU it does not run = %d, want 0", h)
	}
	if err := r.get("GPU-a"); err != nil {
		t.Errorf("GPU-a: %v", err)
	}
}
