package containeremu

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/volcano-vgpu/volcano-vgpu/api"
	"github.com/volcano-vgpu/volcano-vgpu/e2e/kubeletemu"
)

// These tests run vcuda's real workload, libvcuda.so and fake driver (built
// here with make -C vcuda, cached) in both modes; the namespace mode needs
// root and is skipped, saying so, where it is not permitted.

var (
	buildOnce sync.Once
	buildErr  error
	repoRoot  string
)

func vcudaBuilt(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		wd, _ := os.Getwd()
		for d := wd; ; d = filepath.Dir(d) {
			if _, err := os.Stat(filepath.Join(d, "vcuda", "Makefile")); err == nil {
				repoRoot = d
				break
			}
			if filepath.Dir(d) == d {
				buildErr = fmt.Errorf("no vcuda/ above %s", wd)
				return
			}
		}
		out, err := exec.Command("make", "--no-print-directory", "-C", filepath.Join(repoRoot, "vcuda"), "all").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("make -C vcuda: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return repoRoot
}

// node is a simulated node of four 80 GiB GPUs with one container given
// GPU 2 (memMiB, cores%) by a device-plugin-like Allocate response.
type node struct {
	emu  *Emulator
	gpus []GPU
	host string // host side of the device plugin's files
}

func newNode(t *testing.T, mode Mode) *node {
	t.Helper()
	root := vcudaBuilt(t)
	work := t.TempDir()
	emu, err := New(Config{WorkDir: filepath.Join(work, "emu"), DriverDir: filepath.Join(root, "vcuda", "_build", "fake"),
		Workload: filepath.Join(root, "vcuda", "_build", "workload"), Mode: mode})
	if err != nil {
		t.Fatal(err)
	}
	if mode == ModeAuto && emu.Mode() != ModeNamespace {
		t.Skipf("container emulator runs in %s mode here (%s): namespace layout not tested", emu.Mode(), emu.Reason())
	}
	t.Logf("container emulator mode: %s (%s)", emu.Mode(), emu.Reason())
	return &node{emu: emu, gpus: fourGPUs(), host: filepath.Join(work, "plugin")}
}

// container writes what the device plugin would for one container on GPU i.
func (n *node) container(t *testing.T, name string, i int, memMiB uint64, cores uint32) Container {
	t.Helper()
	dir := filepath.Join(n.host, name)
	shared := filepath.Join(dir, "shared")
	if err := os.MkdirAll(shared, 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := api.LimiterConfig{Policy: api.ComputeFixed, PodUID: "uid-" + name, PodNamespace: "ns", PodName: name, ContainerName: "main",
		SharedDir: "/var/run/vcuda", Devices: []api.LimiterDevice{{UUID: n.gpus[i].UUID, MemoryLimitBytes: memMiB << 20, CorePercent: cores}}}
	b, err := cfg.Encode()
	if err != nil {
		t.Fatal(err)
	}
	lib := filepath.Join(repoRoot, "vcuda", "_build", "libvcuda.so")
	for f, data := range map[string][]byte{"vcuda.config": b, "ld.so.preload": []byte("/usr/local/volcano-vgpu/libvcuda.so\n")} {
		if err := os.WriteFile(filepath.Join(dir, f), data, 0o444); err != nil {
			t.Fatal(err)
		}
	}
	r := response(n.gpus[i].UUID)
	r.Mounts = []kubeletemu.Mount{
		{ContainerPath: api.LimiterConfigPath, HostPath: filepath.Join(dir, "vcuda.config"), ReadOnly: true},
		{ContainerPath: "/usr/local/volcano-vgpu/libvcuda.so", HostPath: lib, ReadOnly: true},
		{ContainerPath: "/var/run/vcuda", HostPath: shared},
		{ContainerPath: api.LdPreloadPath, HostPath: filepath.Join(dir, "ld.so.preload"), ReadOnly: true},
	}
	return Container{Node: "node-0", NodeGPUs: n.gpus, PodUID: "uid-" + name, Name: "main", Response: r}
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return c
}

// inBothModes runs f in namespace mode (where permitted) and in fallback mode.
func inBothModes(t *testing.T, f func(t *testing.T, n *node)) {
	for name, mode := range map[string]Mode{"namespace": ModeAuto, "fallback": ModeFallback} {
		t.Run(name, func(t *testing.T) { f(t, newNode(t, mode)) })
	}
}

func TestWorkloadSeesItsLimits(t *testing.T) {
	inBothModes(t, func(t *testing.T, n *node) {
		c := n.container(t, "a", 2, 1024, 30)
		s, err := n.emu.RunWorkload(ctx(t), c, Workload{ChunkMiB: 1, HoldMiB: 100})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%+v", s)
		// GPU 2 only; 1024 MiB in all: 100 held + 924 until refused.
		if !slices.Equal(s.Devices, []string{n.gpus[2].UUID}) || s.CUDATotalMiB != 1024 || s.NVMLTotalMiB != 1024 ||
			s.CUDAFreeMiB != 924 || s.NVMLUsedMiB != 100 || s.AllocatableMiB() != 1024 || s.AllocError != CUDAErrorOutOfMemory {
			t.Errorf("the workload did not see its limits: %+v", s)
		}
	})
}

func TestExposeAllGPUsLimiterRefusesOthers(t *testing.T) {
	inBothModes(t, func(t *testing.T, n *node) {
		c := n.container(t, "a", 2, 1024, 30)
		c.ExposeAllGPUs = true
		for dev, want := range map[int]int64{0: 0, 2: 1024} {
			s, err := n.emu.RunWorkload(ctx(t), c, Workload{Device: dev, ChunkMiB: 64})
			if err != nil {
				t.Fatal(err)
			}
			if len(s.Devices) != 4 || s.CUDATotalMiB != want || s.AllocatableMiB() != want || s.AllocError != CUDAErrorOutOfMemory {
				t.Errorf("device %d with every GPU exposed: %+v; want all 4 listed, %d MiB total and allocatable, then OUT_OF_MEMORY", dev, s, want)
			}
		}
	})
}

func TestWithoutLimiterTheDriverHasTheNodesMemory(t *testing.T) {
	n := newNode(t, ModeFallback)
	c := n.container(t, "raw", 1, 1024, 30)
	c.Response.Mounts = nil // no libvcuda, no config: the bare driver
	s, err := n.emu.RunWorkload(ctx(t), c, Workload{MaxAllocMiB: 1024})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(s.Devices, []string{n.gpus[1].UUID}) || s.CUDATotalMiB != 81920 || s.AllocError != CUDASuccess {
		t.Errorf("bare driver: %+v, want GPU 1 with 81920 MiB", s)
	}
}

// TestNamespaceLayout: the Allocate mounts are at their container paths with
// their modes, the GPUs are the exposed ones, and the host sees none of it.
func TestNamespaceLayout(t *testing.T) {
	n := newNode(t, ModeAuto)
	c := n.container(t, "a", 2, 1024, 30)
	hostPreload, hostErr := os.ReadFile("/etc/ld.so.preload")
	script := strings.Join([]string{
		"cat /etc/ld.so.preload",
		"touch /etc/vcuda/vcuda.config 2>/dev/null && echo config-writable || echo config-readonly",
		"echo hi > /var/run/vcuda/probe && echo shared-writable",
		"ls /dev/fakegpu",
		"test -e /usr/local/nvidia/lib64/libcuda.so.1 && echo driver",
		"echo scratch > /etc/scratch && echo rootfs-writable",
	}, "; ")
	p, err := n.emu.Start(ctx(t), c, "/bin/sh", "-c", script)
	if err != nil {
		t.Fatal(err)
	}
	out, err := p.Wait()
	if err != nil {
		t.Fatalf("%v: %s", err, out.Stderr)
	}
	for _, want := range []string{"/usr/local/volcano-vgpu/libvcuda.so\n", "config-readonly", "shared-writable", n.gpus[2].UUID + ".fakegpu", "driver", "rootfs-writable"} {
		if !strings.Contains(out.Stdout, want) {
			t.Errorf("container output lacks %q:\n%s%s", want, out.Stdout, out.Stderr)
		}
	}
	if strings.Count(out.Stdout, ".fakegpu") != 1 {
		t.Errorf("the container sees other GPUs than its own:\n%s", out.Stdout)
	}
	if b, err := os.ReadFile(filepath.Join(n.host, "a", "shared", "probe")); err != nil || string(b) != "hi\n" {
		t.Errorf("write to the shared dir did not reach the host: %q %v", b, err)
	}
	if _, err := os.Stat("/etc/scratch"); err == nil {
		t.Errorf("a write to the container's /etc reached the host")
	}
	if b, err := os.ReadFile("/etc/ld.so.preload"); string(b) != string(hostPreload) || (err == nil) != (hostErr == nil) {
		t.Errorf("the host's /etc/ld.so.preload changed")
	}
	if _, err := os.Stat(p.Dir); err == nil {
		t.Errorf("container dir %s left behind", p.Dir)
	}
}

// TestSharedGPU: two containers on the same GPU of a node contend on the same
// simulated GPU and neither sees the other's memory.
func TestSharedGPU(t *testing.T) {
	inBothModes(t, func(t *testing.T, n *node) {
		a, b := n.container(t, "a", 3, 2048, 30), n.container(t, "b", 3, 4096, 70)
		c := ctx(t)
		pb, err := n.emu.StartWorkload(c, b, Workload{ChunkMiB: 16, HoldMiB: 1024, Seconds: 1})
		if err != nil {
			t.Fatal(err)
		}
		if err := pb.WaitStderr(c, HoldingMessage); err != nil {
			t.Fatal(err)
		}
		sa, err := n.emu.RunWorkload(c, a, Workload{ChunkMiB: 16, Seconds: 0})
		if err != nil {
			t.Fatal(err)
		}
		sb, err := pb.Summary()
		if err != nil {
			t.Fatal(err)
		}
		// a runs while b holds 1024 MiB of the same GPU: a still has all of its 2048.
		if sa.CUDAFreeMiB != 2048 || sa.NVMLUsedMiB != 0 || sa.AllocatableMiB() != 2048 {
			t.Errorf("a sees b's memory: %+v", sa)
		}
		if sb.CUDATotalMiB != 4096 || sb.AllocatableMiB() != 4096 {
			t.Errorf("b: %+v", sb)
		}
	})
}

// TestUnlinkSharedLiftsTheCap: a tenant that removes libvcuda's shared
// files before its process starts CUDA is booked from zero, so its container
// holds more than its cap (what only the node's memory guard can stop; the
// e2e memory guard test runs this against it).
func TestUnlinkSharedLiftsTheCap(t *testing.T) {
	inBothModes(t, func(t *testing.T, n *node) {
		c := n.container(t, "a", 2, 1024, 100)
		first, err := n.emu.StartWorkload(ctx(t), c, Workload{ChunkMiB: 1, MaxAllocMiB: 1, HoldMiB: 600, Seconds: 1})
		if err != nil {
			t.Fatal(err)
		}
		if err := first.WaitStderr(ctx(t), HoldingMessage); err != nil {
			t.Fatal(err)
		}
		// Within the cap, the second process gets what the first left.
		if s, err := n.emu.RunWorkload(ctx(t), c, Workload{ChunkMiB: 1, MaxAllocMiB: 1, HoldMiB: 600}); err == nil {
			t.Fatalf("a second 600 MiB beside 600 MiB under a 1024 MiB cap was granted: %+v", s)
		}
		s, err := n.emu.RunWorkload(ctx(t), c, Workload{ChunkMiB: 1, MaxAllocMiB: 1, HoldMiB: 600, UnlinkShared: true})
		if err != nil {
			t.Fatalf("the tamperer did not get 600 MiB more: %v", err)
		}
		if s.HeldMiB != 600 {
			t.Errorf("tamperer held %d MiB, want 600", s.HeldMiB)
		}
		if _, err := first.Summary(); err != nil {
			t.Fatal(err)
		}
	})
}

// TestWaitKilled: a process ended by SIGKILL is what WaitKilled waits for;
// one that exits on its own, or still runs when the time is up, is an error.
func TestWaitKilled(t *testing.T) {
	n := newNode(t, ModeFallback)
	c := n.container(t, "a", 2, 1024, 100)
	start := func() *Process {
		p, err := n.emu.Start(ctx(t), c, "/bin/sleep", "30")
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	p := start()
	if err := p.WaitKilled(100 * time.Millisecond); err == nil || !strings.Contains(err.Error(), "still runs") {
		t.Errorf("a running process: %v, want still runs", err)
	}
	if err := syscall.Kill(p.Pid(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := p.WaitKilled(10 * time.Second); err != nil {
		t.Errorf("a process ended by SIGKILL: %v", err)
	}
	q, err := n.emu.Start(ctx(t), c, "/bin/true")
	if err != nil {
		t.Fatal(err)
	}
	if err := q.WaitKilled(10 * time.Second); err == nil || !strings.Contains(err.Error(), "not SIGKILL") {
		t.Errorf("a process that exited 0: %v, want not SIGKILL", err)
	}
	p = start()
	_ = syscall.Kill(p.Pid(), syscall.SIGTERM)
	if err := p.WaitKilled(10 * time.Second); err == nil || !strings.Contains(err.Error(), "not SIGKILL") {
		t.Errorf("a process ended by SIGTERM: %v, want not SIGKILL", err)
	}
}
