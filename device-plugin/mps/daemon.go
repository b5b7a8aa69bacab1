// Package mps runs NVIDIA MPS for the node's MPS GPUs: one control daemon
// per GPU (its own pipe and log directories under the plugin's state dir, so
// that a fault on one GPU's server touches no other GPU), adopted when the
// plugin restarts (running clients keep their server), probed by a control
// command round trip, its log watched for fatal client faults. A GPU whose
// daemon does not answer, or whose server reported a fatal fault, is
// unhealthy with the reason (Report) until a fresh server answers.
//
// Users: an MPS server serves one user; a client of another user waits until
// that server exits (NVIDIA's daemon "pushes it to the pending list"), so two
// users on one GPU stall each other. Each daemon therefore runs its server
// for one configured user (Supervisor.UID, started up front), Allocate
// refuses containers whose pod says they run as another user, and a client
// of another user that got through anyway (an image's own USER) shows as a
// "pending" line in the daemon's log, which the supervisor reports.
package mps

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Env names the MPS variables the daemon and its clients read.
const (
	EnvPipeDir       = "CUDA_MPS_PIPE_DIRECTORY"
	EnvLogDir        = "CUDA_MPS_LOG_DIRECTORY"
	EnvVisible       = "CUDA_VISIBLE_DEVICES"
	ControlLog       = "control.log"
	dirPipe, dirLogs = "pipe", "log"
)

// ErrNoAnswer is wrapped when the control daemon does not answer.
var ErrNoAnswer = errors.New("MPS control daemon does not answer")

// ErrFault is wrapped when a server of the GPU reported a fatal fault.
var ErrFault = errors.New("MPS server reported a fatal fault")

// ErrStart is wrapped when the control daemon cannot be started.
var ErrStart = errors.New("MPS control daemon cannot be started")

// ErrServerStart is wrapped when the daemon starts no usable server.
var ErrServerStart = errors.New("MPS server cannot be started")

// Daemon is the MPS control daemon of one GPU.
type Daemon struct {
	UUID string
	// Dir is the GPU's own directory (Root(stateDir)/<UUID>).
	Dir string
	// Command is nvidia-cuda-mps-control (name in PATH or absolute path).
	Command string
	// Timeout bounds one control command.
	Timeout time.Duration
}

// Root is where the daemons of a plugin whose state dir is stateDir live.
func Root(stateDir string) string { return filepath.Join(stateDir, "mps") }

// New is the daemon of GPU uuid under root.
func New(root, uuid, command string, timeout time.Duration) *Daemon {
	return &Daemon{UUID: uuid, Dir: filepath.Join(root, uuid), Command: command, Timeout: timeout}
}

// PipeDir is the daemon's pipe directory: clients connect here
// (CUDA_MPS_PIPE_DIRECTORY in the container).
func (d *Daemon) PipeDir() string { return filepath.Join(d.Dir, dirPipe) }

// LogDir holds control.log and server.log.
func (d *Daemon) LogDir() string { return filepath.Join(d.Dir, dirLogs) }

func (d *Daemon) env() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "CUDA_") {
			env = append(env, kv)
		}
	}
	return append(env, EnvVisible+"="+d.UUID, EnvPipeDir+"="+d.PipeDir(), EnvLogDir+"="+d.LogDir())
}

// Control sends one command line to the daemon and returns its answer.
func (d *Daemon) Control(ctx context.Context, line string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, d.Timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, d.Command)
	cmd.Env = d.env()
	cmd.Stdin = strings.NewReader(line + "\n")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("%w: GPU %s: %q: %v: %s", ErrNoAnswer, d.UUID, line, err, strings.TrimSpace(out.String()))
	}
	return out.String(), nil
}

// Server is one MPS server of the daemon.
type Server struct {
	PID    int
	Status string // ACTIVE, FAULT, or what the daemon said
}

// Servers lists the daemon's servers with their status.
func (d *Daemon) Servers(ctx context.Context) ([]Server, error) {
	out, err := d.Control(ctx, "get_server_list")
	if err != nil {
		return nil, err
	}
	var servers []Server
	for _, f := range strings.Fields(out) {
		pid, err := strconv.Atoi(f)
		if err != nil {
			return nil, fmt.Errorf("%w: GPU %s: get_server_list answered %q", ErrNoAnswer, d.UUID, strings.TrimSpace(out))
		}
		st, err := d.Control(ctx, "get_server_status "+f)
		if err != nil {
			return nil, err
		}
		servers = append(servers, Server{PID: pid, Status: strings.TrimSpace(st)})
	}
	return servers, nil
}

// Start runs the daemon unless one answers in its pipe directory already
// (adopted: a restarted plugin keeps the running clients' server).
func (d *Daemon) Start(ctx context.Context) (adopted bool, err error) {
	if _, err := d.Control(ctx, "get_server_list"); err == nil {
		return true, nil
	}
	for _, dir := range []string{d.PipeDir(), d.LogDir()} {
		// 0755: clients of the configured user connect through the pipe dir
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return false, fmt.Errorf("%w: MPS directory of GPU %s: %w", ErrStart, d.UUID, err)
		}
	}
	startCtx, cancel := context.WithTimeout(ctx, d.Timeout)
	defer cancel()
	cmd := exec.CommandContext(startCtx, d.Command, "-d")
	cmd.Env = d.env()
	out, err := cmd.CombinedOutput()
	if err != nil {
		return false, fmt.Errorf("%w: GPU %s (%s -d): %v: %s", ErrStart, d.UUID, d.Command, err, strings.TrimSpace(string(out)))
	}
	if _, err := d.Control(ctx, "get_server_list"); err != nil {
		return false, fmt.Errorf("%w: GPU %s: started but does not answer: %w", ErrStart, d.UUID, err)
	}
	return false, nil
}

// StartServer starts the server for uid (the daemon answers with its pid).
// The daemon's first start on a GPU can answer nothing (an H200, driver
// 580): the server is then the one get_server_list shows, once it has
// started (within the Timeout).
func (d *Daemon) StartServer(ctx context.Context, uid int64) (int, error) {
	out, err := d.Control(ctx, fmt.Sprintf("start_server -uid %d", uid))
	if err != nil {
		return 0, err
	}
	if strings.TrimSpace(out) == "" {
		return d.awaitServer(ctx, uid)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(out))
	if err != nil {
		return 0, fmt.Errorf("%w: start_server -uid %d on GPU %s answered %q", ErrServerStart, uid, d.UUID, strings.TrimSpace(out))
	}
	return pid, nil
}

// awaitServer is the pid of the daemon's one server, once it shows.
func (d *Daemon) awaitServer(ctx context.Context, uid int64) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, d.Timeout)
	defer cancel()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		out, err := d.Control(ctx, "get_server_list")
		if err != nil {
			return 0, err
		}
		switch f := strings.Fields(out); len(f) {
		case 0:
		case 1:
			pid, err := strconv.Atoi(f[0])
			if err != nil {
				return 0, fmt.Errorf("%w: GPU %s: get_server_list answered %q", ErrNoAnswer, d.UUID, strings.TrimSpace(out))
			}
			return pid, nil
		default:
			return 0, fmt.Errorf("%w: start_server -uid %d on GPU %s answered nothing, and the daemon lists servers %s: which is this user's is not known", ErrServerStart, uid, d.UUID, strings.Join(f, ", "))
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("%w: start_server -uid %d on GPU %s answered nothing, and no server showed within %v", ErrServerStart, uid, d.UUID, d.Timeout)
		case <-tick.C:
		}
	}
}

// awaitStatus is server pid's status once it is past INITIALIZING (a fresh
// server on an H200, driver 580), or INITIALIZING after the Timeout.
func (d *Daemon) awaitStatus(ctx context.Context, pid int) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, d.Timeout)
	defer cancel()
	for {
		st, err := d.Control(ctx, "get_server_status "+strconv.Itoa(pid))
		if err != nil {
			return "", err
		}
		if st = strings.TrimSpace(st); st != "INITIALIZING" {
			return st, nil
		}
		select {
		case <-ctx.Done():
			return st, nil
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Stop asks the daemon to quit (its servers exit when their clients do).
func (d *Daemon) Stop(ctx context.Context) error {
	_, err := d.Control(ctx, "quit")
	return err
}
