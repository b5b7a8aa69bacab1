package containeremu

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/volcano-vgpu/volcano-vgpu/api"
)

// Mode is how containers are emulated (see the package doc).
type Mode string

const (
	// ModeAuto uses ModeNamespace when this process may use it, else ModeFallback.
	ModeAuto Mode = ""
	// ModeNamespace: a mount namespace, overlay root and bind mounts per container.
	ModeNamespace Mode = "namespace"
	// ModeFallback: a symlink tree, LD_PRELOAD and a rewritten config copy.
	ModeFallback Mode = "fallback"
)

// Config says where the fake driver and the workload are and where the
// emulator keeps its state.
type Config struct {
	// WorkDir holds <node>/gpus (the node's simulated GPUs) and
	// <node>/containers (one directory per running container).
	WorkDir string
	// DriverDir holds the fake libcuda.so.1 and libnvidia-ml.so.1.
	DriverDir string
	// Workload is vcuda's workload program.
	Workload string
	// NodesDir is the local cluster's per-node directory: a node's device
	// plugin writes its own CDI specs (its cdi.specDir) in <node>/cdi there,
	// each node its own directory, as a real node's /var/run/cdi.
	NodesDir string
	Mode     Mode
}

// EnvMode forces a mode in DefaultConfig: "namespace" or "fallback" (unset:
// auto), e.g. to run the e2e tests in the fallback mode on a machine that
// allows namespaces.
const EnvMode = "VGPU_CONTAINEREMU_MODE"

// DefaultConfig uses the vcuda build of the checkout at root (make -C vcuda)
// and keeps its state in <nodesDir>/containeremu, where nodesDir is the local
// cluster's per-node directory (cluster.Config.SocketDir, removed by
// cluster down), so every user of one cluster shares its simulated GPUs. The
// mode comes from EnvMode (New rejects an unknown one).
func DefaultConfig(root, nodesDir string) Config {
	build := filepath.Join(root, "vcuda", "_build")
	return Config{WorkDir: filepath.Join(nodesDir, "containeremu"), DriverDir: filepath.Join(build, "fake"),
		Workload: filepath.Join(build, "workload"), NodesDir: nodesDir, Mode: Mode(os.Getenv(EnvMode))}
}

// Emulator starts processes in emulated containers. It is safe for
// concurrent use.
type Emulator struct {
	cfg    Config
	mode   Mode
	reason string
}

// New checks cfg and chooses the mode.
func New(cfg Config) (*Emulator, error) {
	if !filepath.IsAbs(cfg.WorkDir) || !filepath.IsAbs(cfg.DriverDir) || !filepath.IsAbs(cfg.Workload) {
		return nil, fmt.Errorf("container emulator: WorkDir, DriverDir and Workload must be absolute paths, got %q, %q, %q", cfg.WorkDir, cfg.DriverDir, cfg.Workload)
	}
	var missing []string
	for _, f := range []string{filepath.Join(cfg.DriverDir, "libcuda.so.1"), filepath.Join(cfg.DriverDir, "libnvidia-ml.so.1"), cfg.Workload} {
		if _, err := os.Stat(f); err != nil {
			missing = append(missing, f)
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("container emulator: %s missing: build them with `make -C vcuda`", strings.Join(missing, ", "))
	}
	if err := os.MkdirAll(cfg.WorkDir, 0o755); err != nil {
		return nil, err
	}
	e := &Emulator{cfg: cfg, mode: cfg.Mode}
	switch cfg.Mode {
	case ModeAuto, ModeNamespace:
		err := probeNamespace(cfg.WorkDir)
		switch {
		case err == nil:
			e.mode, e.reason = ModeNamespace, "this process may unshare its mount namespace and mount overlayfs"
		case cfg.Mode == ModeNamespace:
			return nil, fmt.Errorf("container emulator: mount namespace mode not possible here: %w", err)
		default:
			e.mode, e.reason = ModeFallback, "no mount namespace: "+err.Error()
		}
	case ModeFallback:
		e.reason = "requested"
	default:
		return nil, fmt.Errorf("container emulator: mode %q (%s): expected %q, %q or empty (auto)", cfg.Mode, EnvMode, ModeNamespace, ModeFallback)
	}
	return e, nil
}

// Mode is the mode containers run in.
func (e *Emulator) Mode() Mode { return e.mode }

// Reason says why that mode was chosen.
func (e *Emulator) Reason() string { return e.reason }

// NodeGPUDir is the directory of a node's simulated GPU state files.
func (e *Emulator) NodeGPUDir(node string) string { return e.cfg.NodeGPUDir(node) }

// NodeGPUDir is the directory of a node's simulated GPU state files (the
// local cluster's device plugins read their busy time there).
func (c Config) NodeGPUDir(node string) string {
	return filepath.Join(c.WorkDir, node, "gpus")
}

// NodeCDISpecDir is the directory of node's device plugin's own CDI specs.
func (c Config) NodeCDISpecDir(node string) string {
	return filepath.Join(c.NodesDir, node, "cdi")
}

// Start runs argv in container c; argv[0] is a path inside the container
// (WorkloadPath, or any program of the host, which is the image). The
// process is killed when ctx ends.
func (e *Emulator) Start(ctx context.Context, c Container, argv ...string) (*Process, error) {
	if len(argv) == 0 || !strings.HasPrefix(argv[0], "/") {
		return nil, fmt.Errorf("container emulator: argv[0] must be an absolute path in the container, got %q", argv)
	}
	if c.Node == "" || len(c.NodeGPUs) == 0 {
		return nil, fmt.Errorf("container emulator: container %s/%s: node and its GPUs are required", c.PodUID, c.Name)
	}
	if c.CDISpecDir == "" {
		c.CDISpecDir = e.cfg.NodeCDISpecDir(c.Node)
	}
	gpuDir := e.NodeGPUDir(c.Node)
	if err := ensureGPUs(gpuDir, c.devices()); err != nil {
		return nil, err
	}
	s, err := buildSpec(c, hostPaths{DriverDir: e.cfg.DriverDir, Workload: e.cfg.Workload, GPUDir: gpuDir})
	if err != nil {
		return nil, fmt.Errorf("container %s/%s on %s: %w", c.PodUID, c.Name, c.Node, err)
	}
	if c.IgnoresPreload {
		s.Mounts = slices.DeleteFunc(s.Mounts, func(m mountSpec) bool { return m.Target == api.LdPreloadPath })
	}
	specs, err := c.limiterSpecs(c.CDISpecDir)
	if err != nil {
		return nil, fmt.Errorf("container %s/%s on %s: %w", c.PodUID, c.Name, c.Node, err)
	}
	parent := filepath.Join(e.cfg.WorkDir, c.Node, "containers")
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp(parent, c.PodUID+"."+c.Name+".")
	if err != nil {
		return nil, err
	}
	if err := runHooks(ctx, specs, dir, filepath.Base(dir), argv, s.Env); err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("container %s/%s on %s: %w", c.PodUID, c.Name, c.Node, err)
	}
	p := &Process{Mode: e.mode, Dir: dir, done: make(chan struct{})}
	p.cmd = exec.CommandContext(ctx, argv[0], argv[1:]...)
	p.cmd.Env = s.Env
	p.cmd.Stdout, p.cmd.Stderr = &p.stdout, &p.stderr
	p.cmd.WaitDelay = 5 * time.Second
	if e.mode == ModeNamespace {
		err = startInNamespace(p.cmd, dir, s)
	} else {
		err = startFallback(p.cmd, dir, s)
	}
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("container %s/%s on %s (%s mode): %w", c.PodUID, c.Name, c.Node, e.mode, err)
	}
	// The runtime started it in the container's cgroup. (Written just after
	// the start, so a sample of its first milliseconds can find no cgroup:
	// the device plugin then reads it as no container's, as it would a
	// process it saw before the runtime moved it.)
	leave, err := e.placeInCgroup(c, p.cmd.Process.Pid)
	if err != nil {
		_ = p.cmd.Process.Kill()
		_ = p.cmd.Wait()
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("container %s/%s on %s: its cgroup: %w", c.PodUID, c.Name, c.Node, err)
	}
	go func() {
		p.err = p.cmd.Wait()
		leave()
		_ = os.RemoveAll(dir)
		close(p.done)
		p.stderr.wake()
	}()
	return p, nil
}

// ensureGPUs creates the state file of every GPU of the node, empty: the
// fake driver initializes it on first use (under a lock) and keeps it.
func ensureGPUs(dir string, gpus []GPU) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, g := range gpus {
		f, err := os.OpenFile(filepath.Join(dir, stateFile(g.UUID)), os.O_CREATE|os.O_RDWR, 0o666)
		if err != nil {
			return fmt.Errorf("simulated GPU %s: %w", g.UUID, err)
		}
		if err := f.Close(); err != nil {
			return err
		}
	}
	return nil
}

// Process is a process running in an emulated container.
type Process struct {
	Mode Mode
	// Dir is the container's directory on the host (removed at exit).
	Dir    string
	cmd    *exec.Cmd
	stdout bytes.Buffer // written by exec's copier, read after done
	stderr watchBuffer
	done   chan struct{}
	err    error
}

// Output is what a finished process printed.
type Output struct {
	Stdout, Stderr string
}

// Pid is the process id (in the host's pid namespace).
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Wait waits for the process to exit.
func (p *Process) Wait() (Output, error) {
	<-p.done
	return Output{Stdout: p.stdout.String(), Stderr: p.stderr.String()}, p.err
}

// WaitKilled waits up to within for the process to end by SIGKILL, as the
// node's memory guard ends one; an end of any other kind, or none within,
// is an error saying which.
func (p *Process) WaitKilled(within time.Duration) error {
	select {
	case <-p.done:
	case <-time.After(within):
		return fmt.Errorf("process %d still runs %s later", p.Pid(), within)
	}
	var exit *exec.ExitError
	if !errors.As(p.err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		return fmt.Errorf("process %d ended with %v, not SIGKILL", p.Pid(), p.err)
	}
	return nil
}

// WaitStderr waits until the process has written substr to stderr.
func (p *Process) WaitStderr(ctx context.Context, substr string) error {
	for {
		seen, wake := p.stderr.contains(substr)
		if seen {
			return nil
		}
		select {
		case <-p.done:
			if seen, _ := p.stderr.contains(substr); seen {
				return nil
			}
			return fmt.Errorf("process exited (%v) without writing %q; stderr: %s", p.err, substr, p.stderr.String())
		case <-ctx.Done():
			return fmt.Errorf("waiting for %q on stderr: %w", substr, ctx.Err())
		case <-wake:
		}
	}
}

// watchBuffer is a buffer whose readers can wait for the next write.
type watchBuffer struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	next chan struct{} // closed at the next write
}

func (w *watchBuffer) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n, err := w.buf.Write(b)
	w.wakeLocked()
	return n, err
}

func (w *watchBuffer) wake() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.wakeLocked()
}

func (w *watchBuffer) wakeLocked() {
	if w.next != nil {
		close(w.next)
		w.next = nil
	}
}

func (w *watchBuffer) contains(s string) (bool, <-chan struct{}) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if strings.Contains(w.buf.String(), s) {
		return true, nil
	}
	if w.next == nil {
		w.next = make(chan struct{})
	}
	return false, w.next
}

func (w *watchBuffer) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}
