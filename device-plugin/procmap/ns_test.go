package procmap

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestOwnersRealNamespaces runs processes the way a container runtime does:
// each in a cgroup named as kubelet names it (cgroupfs and systemd layouts,
// made for real under the pids hierarchy) and in its own pid namespace with
// its own /proc, where it is pid 1. The mapper, in the host's namespace,
// must find its container from its host pid.
func TestOwnersRealNamespaces(t *testing.T) {
	base := "/sys/fs/cgroup/pids"
	if os.Geteuid() != 0 {
		t.Skip("needs root to create cgroups and pid namespaces")
	}
	if _, err := os.Stat(filepath.Join(base, "cgroup.procs")); err != nil {
		t.Skipf("no writable cgroup v1 pids hierarchy: %v", err)
	}
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Skip("no unshare(1)")
	}
	tag := fmt.Sprintf("%08x", os.Getpid())
	podA := tag + "-1111-4111-8111-111111111111"
	podB := tag + "-2222-4222-8222-222222222222"
	idA := strings.Repeat("a", 56) + tag
	idB := strings.Repeat("b", 56) + tag
	idSide := strings.Repeat("c", 56) + tag
	for _, tc := range []struct {
		name, cgroup, pod, id, container string
	}{
		{"cgroupfs burstable", "kubepods/burstable/pod" + podA + "/" + idA, podA, idA, "main"},
		{"cgroupfs, a second container of the pod", "kubepods/burstable/pod" + podA + "/" + idSide, podA, idSide, "sidecar"},
		{"systemd guaranteed", "kubepods.slice/kubepods-pod" + strings.ReplaceAll(podB, "-", "_") + ".slice/cri-containerd-" + idB + ".scope", podB, idB, "trainer"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(base, tc.cgroup)
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { removeCgroups(base, tc.cgroup) })
			hostPID := startInNamespace(t, dir)
			// Inside its namespace the process is pid 1: its own pid says nothing
			// on the host.
			if ns := nsPIDs(t, hostPID); ns[len(ns)-1] != "1" {
				t.Fatalf("process %d is %v in its namespace, want pid 1 there", hostPID, ns)
			}
			names := map[string]string{podA + "/" + idA: "main", podA + "/" + idSide: "sidecar", podB + "/" + idB: "trainer"}
			m := Mapper{Names: func(pod, id string) (string, bool) { n, ok := names[pod+"/"+id]; return n, ok }}
			key, ok := m.Owners(uint32(hostPID))
			if diff := cmp.Diff(tc.pod+"/"+tc.container, key); !ok || diff != "" {
				t.Errorf("Owners(%d) ok=%v (-want +got):\n%s", hostPID, ok, diff)
			}
			cg, err := m.Lookup(uint32(hostPID))
			if err != nil || cg.ContainerID != tc.id {
				t.Errorf("Lookup(%d) = %+v, %v; want container %s", hostPID, cg, err, tc.id)
			}
		})
	}
	t.Run("a host process is nobody's", func(t *testing.T) {
		if key, ok := (Mapper{Names: func(string, string) (string, bool) { return "x", true }}).Owners(uint32(os.Getpid())); ok {
			t.Errorf("the test process mapped to %q", key)
		}
	})
}

// startInNamespace starts `sleep` as pid 1 of a new pid namespace with its
// own /proc, inside cgroup dir, and returns its host pid.
func startInNamespace(t *testing.T, dir string) int {
	t.Helper()
	cmd := exec.Command("sh", "-c", `echo $$ > "$1/cgroup.procs" && exec unshare --pid --fork --kill-child --mount-proc sleep 60`, "sh", dir)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", cmd.Process.Pid, cmd.Process.Pid))
		if f := strings.Fields(string(b)); len(f) == 1 {
			pid, _ := strconv.Atoi(f[0])
			if comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid)); strings.TrimSpace(string(comm)) == "sleep" {
				return pid
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("the namespaced process under %s did not start", dir)
	return 0
}

// nsPIDs is the NSpid line of a process: its pid in each namespace, host first.
func nsPIDs(t *testing.T, pid int) []string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "NSpid:"); ok {
			return strings.Fields(v)
		}
	}
	t.Fatalf("no NSpid in /proc/%d/status", pid)
	return nil
}

// removeCgroups waits for the container cgroup to empty (its pid 1 dies with
// unshare, asynchronously), then removes the created directories, deepest
// first, up to a directory still in use; the top level (kubepods,
// kubepods.slice) is shared with other tests and stays.
func removeCgroups(base, rel string) {
	procs := filepath.Join(base, rel, "cgroup.procs")
	for i := 0; i < 1000; i++ {
		if b, err := os.ReadFile(procs); err != nil || len(strings.TrimSpace(string(b))) == 0 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	for p := rel; strings.Contains(p, "/"); p = filepath.Dir(p) { // never the shared top level
		if os.Remove(filepath.Join(base, p)) != nil {
			return
		}
	}
}
