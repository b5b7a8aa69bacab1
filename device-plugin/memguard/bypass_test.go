package memguard

import (
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/procmap"
)

// TestProcessWithoutTheLimiter: in an emulated container with a 30% share,
// one process runs with libvcuda preloaded and a second without it (as a
// static or musl program does: nothing loads it), both on the fake GPU. The
// guard reads each one's real memory map from /proc: with the kill action
// it ends the second, says so on the pod and counts it, and leaves the
// first alone; with report it ends nothing and says so once.
func TestProcessWithoutTheLimiter(t *testing.T) {
	for _, kill := range []bool{true, false} {
		name := map[bool]string{true: "kill", false: "report"}[kill]
		t.Run(name, func(t *testing.T) { bypassScenario(t, kill) })
	}
}

func bypassScenario(t *testing.T, kill bool) {
	src, uuid := onFakeDriver(t)
	c := newContainer(t, uuid, 8192)
	limitedPID := c.start(c.hold(1000))
	var env []string
	for _, kv := range c.env() {
		if !strings.HasPrefix(kv, "LD_PRELOAD=") {
			env = append(env, kv)
		}
	}
	cmd, barePID := c.execEnv(c.hold(1000), env)

	tenants := []Tenant{{Key: c.podUID + "/main", PodUID: c.podUID, Namespace: "ns", Pod: "bypass", Container: "main", UUID: uuid,
		Model: "Fake GPU", CapMiB: 8192, Compute: true, Cores: 30}}
	lib, err := filepath.Abs(filepath.Join(build, "libvcuda.so"))
	if err != nil {
		t.Fatal(err)
	}
	// The processes load it from the build directory (LD_PRELOAD): found by
	// the file's inode, not the path containers have it at.
	l := procmap.StatLibrary(lib, "/usr/local/volcano-vgpu/libvcuda.so")
	g := newTestGuard(t, src, tenants, c)
	ctx, client, r := g.ctx, g.client, g.r
	r.KillUnlimited = kill
	r.Limited = func(pid uint32) (bool, error) { return g.mapper.Maps(pid, l) }

	kills, found := r.TickAll(ctx)
	if len(kills) != 0 || len(found) != 1 || found[0].PID != uint32(barePID) || found[0].Killed != kill {
		t.Fatalf("kills %+v, found %+v: want process %d (no limiter) found, killed: %v; the preloaded %d left alone", kills, found, barePID, kill, limitedPID)
	}
	if kill {
		if err := cmd.Wait(); err == nil || !strings.Contains(err.Error(), "killed") {
			t.Errorf("the process without the limiter ended with %v, want killed", err)
		}
	} else {
		if !alive(barePID) {
			t.Errorf("report: the process without the limiter (host pid %d) was killed", barePID)
		}
		// ended here, so that its nsenter reaps it: an orphan would stay a
		// zombie under the container's pid 1 and on the fake GPU's books
		_ = syscall.Kill(barePID, syscall.SIGKILL)
		_ = cmd.Wait()
	}
	if !alive(limitedPID) {
		t.Errorf("the preloaded process (host pid %d) was killed", limitedPID)
	}
	if _, again := r.TickAll(ctx); kill && len(again) != 0 {
		t.Errorf("the next period found %+v", again)
	}

	want := "without libvcuda.so"
	var msgs []string
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline) && len(msgs) == 0; time.Sleep(20 * time.Millisecond) {
		evs, err := client.CoreV1().Events("ns").List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range evs.Items {
			if e.Reason == ReasonLimiterBypassed && e.Type == "Warning" && e.InvolvedObject.Name == "bypass" {
				msgs = append(msgs, e.Message)
				if e.Count > 1 {
					t.Errorf("Event sent %d times, want once", e.Count)
				}
			}
		}
	}
	if len(msgs) != 1 || !strings.Contains(msgs[0], want) {
		t.Errorf("Events %q: want one saying %q", msgs, want)
	}
	t.Logf("fake driver, real memory maps: the process without libvcuda (host pid %d) found in the first period (%s); the preloaded one (host pid %d) left alone", barePID, map[bool]string{true: "killed", false: "reported"}[kill], limitedPID)
}
