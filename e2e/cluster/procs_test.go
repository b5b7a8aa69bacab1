package cluster

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/volcano-vgpu/volcano-vgpu/e2e/sim/simconfig"
)

func testConfig(t *testing.T) Config {
	dir := t.TempDir()
	return Config{BinDir: filepath.Join(dir, "bin"), StateDir: filepath.Join(dir, "state")}
}

func TestStalePidFileIsNotRunning(t *testing.T) {
	cfg := testConfig(t)
	if err := os.MkdirAll(cfg.pidDir(), 0o755); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, content string
	}{
		{"dead pid", "999999999"},
		{"dead pid with start time", "999999999 12345"},
		{"garbage", "not-a-pid"},
		{"pid without start time", "1"},
		// pid 1 lives but started at another time than the process we recorded.
		{"recycled pid", "1 999999999999"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := os.WriteFile(cfg.pidFile("etcd"), []byte(tc.content), 0o644); err != nil {
				t.Fatal(err)
			}
			if _, alive := cfg.running("etcd"); alive {
				t.Errorf("pid file %q reported alive", tc.content)
			}
			if err := cfg.stop("etcd", time.Second); err != nil {
				t.Errorf("stop: %v", err)
			}
			if _, err := os.Stat(cfg.pidFile("etcd")); !os.IsNotExist(err) {
				t.Errorf("stop left the pid file behind")
			}
		})
	}
}

func TestStartStopRealProcess(t *testing.T) {
	cfg := testConfig(t)
	if err := os.MkdirAll(cfg.BinDir, 0o755); err != nil {
		t.Fatal(err)
	}
	sleep := filepath.Join(cfg.BinDir, "sleeper")
	if err := os.WriteFile(sleep, []byte("#!/bin/sh\nexec sleep 60\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	pid, err := cfg.start(proc{name: "sleeper", args: []string{sleep}})
	if err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(cfg.pidFile("sleeper"))
	if f := strings.Fields(string(data)); len(f) != 2 || f[0] != strconv.Itoa(pid) {
		t.Fatalf("pid file %q, want %d and its start time", data, pid)
	}
	if err := cfg.stop("sleeper", 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if _, alive := cfg.running("sleeper"); alive {
		t.Fatal("process still alive after stop")
	}
}

func TestMissingBinaryNamesTheFix(t *testing.T) {
	cfg := testConfig(t)
	_, err := cfg.start(proc{name: "etcd", args: []string{filepath.Join(cfg.BinDir, "etcd")}})
	if err == nil || !strings.Contains(err.Error(), "run `make build`") {
		t.Fatalf("err = %v, want a hint to run make build", err)
	}
}

func TestPortInUseIsReported(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port
	err = portFree("kube-apiserver", port)
	if err == nil || !strings.Contains(err.Error(), "in use by a process this cluster did not start") || !strings.Contains(err.Error(), EnvPortBase) {
		t.Fatalf("err = %v", err)
	}
}

func TestWaitForReportsDeadProcess(t *testing.T) {
	cfg := testConfig(t)
	err := cfg.waitFor(context.Background(), "ghost", 5*time.Second, func() error { return os.ErrNotExist })
	if err == nil || !strings.Contains(err.Error(), "exited during start-up") {
		t.Fatalf("err = %v", err)
	}
}

func TestDefaultConfigPortBase(t *testing.T) {
	t.Setenv(EnvPortBase, "31000")
	cfg, err := DefaultConfig("/repo")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Ports.APIServer != 31003 {
		t.Errorf("APIServer port = %d, want 31003", cfg.Ports.APIServer)
	}
	t.Setenv(EnvPortBase, "http")
	if _, err := DefaultConfig("/repo"); err == nil || !strings.Contains(err.Error(), EnvPortBase) {
		t.Errorf("bad base: err = %v", err)
	}
}

func TestNodeObject(t *testing.T) {
	f, err := simconfig.Load(filepath.Join("..", "sim", "clusters", "local.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	n := NodeObject(f.Nodes()[0])
	if n.Annotations[kwokNodeAnnotation] != "fake" || n.Labels[LabelSimulated] != "true" {
		t.Errorf("node %s lacks the kwok annotation or simulated label: %v %v", n.Name, n.Annotations, n.Labels)
	}
	if got := n.Status.Allocatable.Cpu().String(); got != "128" {
		t.Errorf("cpu = %s, want 128", got)
	}
}

// A process is ours from the moment Start returns: nothing read right after
// Start (such as a still empty /proc/<pid>/cmdline) may make it look dead.
func TestRunningRightAfterStart(t *testing.T) {
	cfg := testConfig(t)
	if err := os.MkdirAll(cfg.BinDir, 0o755); err != nil {
		t.Fatal(err)
	}
	sleep := filepath.Join(cfg.BinDir, "sleeper")
	if err := os.WriteFile(sleep, []byte("#!/bin/sh\nexec sleep 60\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for i := range 50 {
		name := fmt.Sprintf("sleeper-%d", i)
		if _, err := cfg.start(proc{name: name, args: []string{sleep}}); err != nil {
			t.Fatal(err)
		}
		_, alive := cfg.running(name)
		if err := cfg.stop(name, 5*time.Second); err != nil {
			t.Fatal(err)
		}
		if !alive {
			t.Fatalf("start %d: process reported dead right after it was started", i)
		}
		if _, alive := cfg.running(name); alive {
			t.Fatalf("start %d: process alive after stop", i)
		}
	}
}

func TestStopStartedSinceKeepsWhatRanBefore(t *testing.T) {
	cfg := testConfig(t)
	if err := os.MkdirAll(cfg.BinDir, 0o755); err != nil {
		t.Fatal(err)
	}
	sleep := filepath.Join(cfg.BinDir, "sleeper")
	if err := os.WriteFile(sleep, []byte("#!/bin/sh\nexec sleep 60\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := cfg.start(proc{name: "etcd", args: []string{sleep}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cfg.stop("etcd", 5*time.Second) })
	before := Status(cfg) // etcd was running before this "start"
	for _, n := range []string{"kube-apiserver", "vgpu-device-plugin-n1"} {
		if _, err := cfg.start(proc{name: n, args: []string{sleep}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := cfg.stopStartedSince(context.Background(), before); err != nil {
		t.Fatal(err)
	}
	got := Status(cfg)
	want := map[string]bool{"etcd": true}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("after stopping what the failed start launched (-want +got):\n%s", diff)
	}
}

func TestParseProcStat(t *testing.T) {
	tests := []struct {
		name, stat string
		want       procStat
		wantErr    bool
	}{
		{name: "plain", stat: "42 (etcd) S 1 42 42 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 9 0 777 1000 10",
			want: procStat{state: 'S', startTime: 777}},
		{name: "name with spaces and parentheses", stat: "42 (a) b (c) Z 1 42 42 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 9 0 123 1000 10",
			want: procStat{state: 'Z', startTime: 123}},
		{name: "truncated", stat: "42 (etcd) S 1 42", wantErr: true},
		{name: "no name", stat: "42 etcd S", wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseProcStat(tc.stat)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tc.wantErr)
			}
			if got != tc.want {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}
