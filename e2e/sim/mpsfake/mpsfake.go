// Package mpsfake is a stand-in for NVIDIA's nvidia-cuda-mps-control, for
// tests and the simulated cluster (never shipped). Like the real one it is one
// program in two roles: started with -d it forks a control daemon that
// listens on $CUDA_MPS_PIPE_DIRECTORY/control and logs to
// $CUDA_MPS_LOG_DIRECTORY/control.log; started without arguments it sends
// each line of its stdin to that daemon and prints the answers, failing when
// no daemon answers.
//
// Commands of the real program it models: get_server_list,
// start_server -uid UID, get_server_status PID (ACTIVE, FAULT, or INITIALIZING
// while the daemon's first server starts),
// shutdown_server PID [-f], set_default_active_thread_percentage N,
// get_default_active_thread_percentage, set_active_thread_percentage PID N,
// get_active_thread_percentage PID, quit. A server of another user than
// the running one is not started: the request waits ("pending"), as the real
// daemon makes clients of a second user wait until the first user's server
// exits.
//
// Faults the real thing has, injected by commands of the fake's own
// (prefix fake_): fake_fault PID (a client hit a fatal GPU exception: the
// server goes to FAULT and the log says so), fake_server_exit PID STATUS (the
// server exits, as a faulted one does when its last client is gone),
// fake_crash (the daemon dies at once, leaving its socket behind).
package mpsfake

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// DaemonEnv marks the forked process as the daemon.
const DaemonEnv = "VGPU_FAKE_MPS_DAEMON"

// SocketName and PIDFile are the daemon's files in the pipe directory.
const (
	SocketName = "control"
	PIDFile    = "nvidia-cuda-mps-control.pid"
)

// Main runs the program with args (without the program name).
func Main(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	pipe, logDir := dirs()
	switch {
	case os.Getenv(DaemonEnv) == "1":
		if err := serve(pipe, logDir); err != nil {
			fmt.Fprintln(stderr, err)
			return 1
		}
		return 0
	case len(args) == 1 && args[0] == "-d":
		return startDaemon(pipe, stdout, stderr)
	case len(args) == 0:
		return client(pipe, stdin, stdout)
	}
	fmt.Fprintf(stderr, "usage: nvidia-cuda-mps-control [-d]\n")
	return 1
}

func dirs() (pipe, logDir string) {
	pipe, logDir = os.Getenv("CUDA_MPS_PIPE_DIRECTORY"), os.Getenv("CUDA_MPS_LOG_DIRECTORY")
	if pipe == "" {
		pipe = "/tmp/nvidia-mps"
	}
	if logDir == "" {
		logDir = "/var/log/nvidia-mps"
	}
	return pipe, logDir
}

// ask sends one command and returns the answer.
func ask(pipe, line string, timeout time.Duration) (string, error) {
	c, err := net.DialTimeout("unix", filepath.Join(pipe, SocketName), timeout)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(timeout))
	if _, err := io.WriteString(c, line+"\n"); err != nil {
		return "", err
	}
	_ = c.(*net.UnixConn).CloseWrite()
	b, err := io.ReadAll(c)
	return string(b), err
}

func client(pipe string, stdin io.Reader, stdout io.Writer) int {
	sc := bufio.NewScanner(stdin)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		out, err := ask(pipe, line, 5*time.Second)
		if err != nil {
			fmt.Fprintln(stdout, "Cannot find MPS control daemon process")
			return 1
		}
		fmt.Fprint(stdout, out)
	}
	return 0
}

func startDaemon(pipe string, stdout, stderr io.Writer) int {
	if _, err := ask(pipe, "get_server_list", time.Second); err == nil {
		fmt.Fprintln(stderr, "An instance of this daemon is already running")
		return 1
	}
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), DaemonEnv+"=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	_ = cmd.Process.Release()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if _, err := ask(pipe, "get_server_list", time.Second); err == nil {
			return 0
		}
	}
	fmt.Fprintln(stderr, "the MPS control daemon did not start")
	return 1
}

type server struct {
	uid     int64
	fault   bool
	percent float64   // its active-thread percentage (clients may only lower it)
	ready   time.Time // INITIALIZING before it
}

type daemon struct {
	pipe    string
	log     *os.File
	ln      net.Listener
	mu      sync.Mutex
	servers map[int]*server
	pending []int64 // users whose server waits for the running one to exit
	nextPID int
	percent float64
	started bool // a server was started before (the first start answers nothing: start)
}

func serve(pipe, logDir string) error {
	for _, d := range []string{pipe, logDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	sock := filepath.Join(pipe, SocketName)
	_ = os.Remove(sock) // a crashed daemon's
	ln, err := net.Listen("unix", sock)
	if err != nil {
		return err
	}
	log, err := os.OpenFile(filepath.Join(logDir, "control.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(pipe, PIDFile), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		return err
	}
	d := &daemon{pipe: pipe, log: log, ln: ln, servers: map[int]*server{}, nextPID: os.Getpid()*10 + 1, percent: 100}
	d.logf("INFO", "Starting control daemon using socket %s", sock)
	for {
		c, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			return err
		}
		d.handle(c)
	}
}

func (d *daemon) logf(level, format string, args ...any) {
	fmt.Fprintf(d.log, "[%s Control %d] [%s] %s\n", time.Now().UTC().Format("2006-01-02 15:04:05.000"), os.Getpid(), level, fmt.Sprintf(format, args...))
}

func (d *daemon) handle(c net.Conn) {
	defer c.Close()
	line, _ := bufio.NewReader(c).ReadString('\n')
	f := strings.Fields(line)
	if len(f) == 0 {
		return
	}
	d.mu.Lock()
	out, after := d.command(f)
	d.mu.Unlock()
	d.logf("INFO", "User did send %s", strings.Join(f, " "))
	io.WriteString(c, out)
	if after != nil {
		_ = c.Close()
		after()
	}
}

// command answers one command; after, when set, runs once the answer is sent.
func (d *daemon) command(f []string) (out string, after func()) {
	pid := func() (int, *server, string) {
		if len(f) < 2 {
			return 0, nil, "Invalid command\n"
		}
		p, err := strconv.Atoi(f[1])
		if err != nil || d.servers[p] == nil {
			return 0, nil, fmt.Sprintf("Server %s not found\n", f[1])
		}
		return p, d.servers[p], ""
	}
	switch f[0] {
	case "get_server_list":
		pids := make([]int, 0, len(d.servers))
		for p := range d.servers {
			pids = append(pids, p)
		}
		sort.Ints(pids)
		var b strings.Builder
		for _, p := range pids {
			fmt.Fprintln(&b, p)
		}
		return b.String(), nil
	case "start_server":
		if len(f) != 3 || f[1] != "-uid" {
			return "Invalid command\n", nil
		}
		uid, err := strconv.ParseInt(f[2], 10, 64)
		if err != nil {
			return "Invalid command\n", nil
		}
		return d.start(uid), nil
	case "get_server_status":
		_, s, msg := pid()
		if s == nil {
			return msg, nil
		}
		if s.fault {
			return "FAULT\n", nil
		}
		if time.Now().Before(s.ready) {
			return "INITIALIZING\n", nil
		}
		return "ACTIVE\n", nil
	case "shutdown_server":
		p, s, msg := pid()
		if s == nil {
			return msg, nil
		}
		d.exit(p, 0)
		return "", nil
	case "set_active_thread_percentage":
		p, s, msg := pid()
		if s == nil || len(f) != 3 {
			return msg + "usage: set_active_thread_percentage PID PERCENT\n", nil
		}
		v, err := strconv.ParseFloat(f[2], 64)
		if err != nil || v <= 0 || v > 100 {
			return "Invalid value\n", nil
		}
		s.percent = v
		d.logf("INFO", "Server %d active thread percentage set to %.1f", p, v)
		return fmt.Sprintf("%.1f\n", v), nil
	case "get_active_thread_percentage":
		_, s, msg := pid()
		if s == nil {
			return msg, nil
		}
		return fmt.Sprintf("%.1f\n", s.percent), nil
	case "set_default_active_thread_percentage":
		if len(f) != 2 {
			return "Invalid command\n", nil
		}
		v, err := strconv.ParseFloat(f[1], 64)
		if err != nil || v <= 0 || v > 100 {
			return "Invalid value\n", nil
		}
		d.percent = v
		return fmt.Sprintf("%.1f\n", v), nil
	case "get_default_active_thread_percentage":
		return fmt.Sprintf("%.1f\n", d.percent), nil
	case "quit":
		d.logf("INFO", "Exit")
		return "", func() {
			_ = os.Remove(filepath.Join(d.pipe, PIDFile))
			_ = d.ln.Close() // removes the socket
		}
	case "fake_fault":
		p, s, msg := pid()
		if s == nil {
			return msg, nil
		}
		s.fault = true
		d.logf("ERROR", "Server %d: a client encountered a fatal GPU exception; the server is in FAULT state until its clients exit", p)
		return "", nil
	case "fake_server_exit":
		p, s, msg := pid()
		if s == nil || len(f) != 3 {
			return msg + "usage: fake_server_exit PID STATUS\n", nil
		}
		status, _ := strconv.Atoi(f[2])
		d.exit(p, status)
		return "", nil
	case "fake_crash":
		os.Exit(3)
	}
	return "Invalid command\n", nil
}

func (d *daemon) start(uid int64) string {
	for p, s := range d.servers {
		if s.uid == uid {
			return fmt.Sprintf("%d\n", p)
		}
		d.pending = append(d.pending, uid)
		d.logf("INFO", "Server %d for user %d is running: push client of user %d to pending list", p, s.uid, uid)
		return fmt.Sprintf("Server for user %d pending\n", uid)
	}
	p := d.nextPID
	d.nextPID++
	d.logf("INFO", "Starting new server %d for user %d", p, uid)
	if !d.started {
		// The real daemon's first start_server on a GPU (an H200, driver
		// 580) answered nothing; its server was listed, INITIALIZING for a
		// while.
		d.started = true
		d.servers[p] = &server{uid: uid, percent: d.percent, ready: time.Now().Add(firstServerInit)}
		return ""
	}
	d.servers[p] = &server{uid: uid, percent: d.percent}
	return fmt.Sprintf("%d\n", p)
}

// firstServerInit: how long the daemon's first server is INITIALIZING.
const firstServerInit = 300 * time.Millisecond

func (d *daemon) exit(p, status int) {
	delete(d.servers, p)
	d.logf("INFO", "Server %d exited with status %d", p, status)
	if len(d.pending) > 0 {
		uid := d.pending[0]
		d.pending = d.pending[1:]
		d.start(uid)
	}
}
