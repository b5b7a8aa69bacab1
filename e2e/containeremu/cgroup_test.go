package containeremu

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/procmap"
)

const testPodUID = "5f0c2a1e-8b7d-4c3a-9e21-0d6f4b8a7c10"

// TestCgroupFileMapsToTheContainer: what the emulator writes as a process's
// /proc/<pid>/cgroup is what the device plugin reads back as the pod and
// container, in both layouts and every QoS class.
func TestCgroupFileMapsToTheContainer(t *testing.T) {
	id := ContainerID(testPodUID, "main")
	if len(id) != 64 {
		t.Fatalf("container ID %q: want 64 hex digits, as a runtime gives", id)
	}
	for _, tc := range []struct {
		name    string
		layout  cgroupLayout
		qos     string
		wantQoS string
	}{
		{"systemd, cgroup v2, best effort (no class given)", systemdV2, "", "besteffort"},
		{"systemd, cgroup v2, burstable", systemdV2, "Burstable", "burstable"},
		{"systemd, cgroup v2, guaranteed", systemdV2, "Guaranteed", "guaranteed"},
		{"cgroupfs, cgroup v1, best effort", cgroupfsV1, "BestEffort", "besteffort"},
		{"cgroupfs, cgroup v1, guaranteed", cgroupfsV1, "Guaranteed", "guaranteed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := cgroupFile(tc.layout, testPodUID, id, tc.qos)
			cg, err := procmap.ParseCgroupFile(body)
			if err != nil {
				t.Fatalf("%q: %v", body, err)
			}
			if cg.PodUID != testPodUID || cg.ContainerID != id || cg.QoS != tc.wantQoS {
				t.Errorf("%q read as %+v, want pod %s, container %s, QoS %s", body, cg, testPodUID, id, tc.wantQoS)
			}
		})
	}
	if layoutOf("a100-80g-0") == layoutOf("a100-80g-1") && layoutOf("a100-80g-1") == layoutOf("l4-0") && layoutOf("l4-0") == layoutOf("l4-1") {
		t.Error("four nodes, one cgroup layout: the simulated fleet should have both")
	}
}

// TestProcessInItsCgroup: while a container's process runs, the node's proc
// root maps its pid to the container (as /proc does for a runtime's
// process); once it exits, the pid is gone.
func TestProcessInItsCgroup(t *testing.T) {
	inBothModes(t, func(t *testing.T, n *node) {
		c := n.container(t, "a", 2, 1024, 30)
		c.PodUID = testPodUID
		p, err := n.emu.StartWorkload(ctx(t), c, Workload{ChunkMiB: 1, MaxAllocMiB: 1, HoldMiB: 10, Seconds: 0.5})
		if err != nil {
			t.Fatal(err)
		}
		if err := p.WaitStderr(ctx(t), HoldingMessage); err != nil {
			t.Fatal(err)
		}
		root := n.emu.cfg.NodeProcRoot(c.Node)
		m := procmap.Mapper{ProcRoot: root, Names: func(uid, id string) (string, bool) {
			return "main", uid == testPodUID && id == ContainerID(testPodUID, "main")
		}}
		if key, ok := m.Owners(uint32(p.Pid())); !ok || key != testPodUID+"/main" {
			cg, err := m.Lookup(uint32(p.Pid()))
			t.Errorf("pid %d maps to %q (%v); its cgroup %+v, %v", p.Pid(), key, ok, cg, err)
		}
		if _, err := p.Summary(); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(filepath.Join(root, strconv.Itoa(p.Pid()))); !os.IsNotExist(err) {
			t.Errorf("pid %d still in the proc root after it exited (%v)", p.Pid(), err)
		}
	})
}

// TestProcessMapsTheLimiter: the node's proc root shows each process's real
// memory map, so the device plugin sees libvcuda loaded into a container's
// process (by the host file's inode: an emulated container's paths are the
// host's) and not into one whose loader ignores /etc/ld.so.preload, which
// runs unlimited: it takes the GPU memory the cap would refuse.
func TestProcessMapsTheLimiter(t *testing.T) {
	inBothModes(t, func(t *testing.T, n *node) {
		lib := procmap.StatLibrary(filepath.Join(repoRoot, "vcuda", "_build", "libvcuda.so"), "/usr/local/volcano-vgpu/libvcuda.so")
		for _, tc := range []struct {
			name           string
			ignoresPreload bool
			want           bool
		}{
			{"preloaded", false, true},
			{"a loader that ignores /etc/ld.so.preload", true, false},
		} {
			t.Run(tc.name, func(t *testing.T) {
				c := n.container(t, "a", 2, 1024, 30)
				c.IgnoresPreload = tc.ignoresPreload
				p, err := n.emu.StartWorkload(ctx(t), c, Workload{ChunkMiB: 1, MaxAllocMiB: 2048, HoldMiB: 10, Seconds: 0.5})
				if err != nil {
					t.Fatal(err)
				}
				if err := p.WaitStderr(ctx(t), HoldingMessage); err != nil {
					t.Fatal(err)
				}
				m := procmap.Mapper{ProcRoot: n.emu.cfg.NodeProcRoot(c.Node)}
				got, err := m.Maps(uint32(p.Pid()), lib)
				if err != nil || got != tc.want {
					t.Errorf("libvcuda mapped in pid %d: %v, %v; want %v", p.Pid(), got, err, tc.want)
				}
				s, err := p.Summary()
				if err != nil {
					t.Fatal(err)
				}
				// 10 held + what the cap left (1024) or, unlimited, the 2048 asked
				if limited := s.AllocatableMiB() <= 1024; limited != tc.want {
					t.Errorf("the workload allocated %d MiB: limited %v, want %v", s.AllocatableMiB(), limited, tc.want)
				}
			})
		}
	})
}
