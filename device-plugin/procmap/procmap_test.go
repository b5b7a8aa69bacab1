package procmap

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
)

const (
	uid  = "0b6d7e5c-2f3a-4c1e-9a7b-5d4c3b2a1f00"
	uidU = "0b6d7e5c_2f3a_4c1e_9a7b_5d4c3b2a1f00"
	cid  = "4f1a9c0d2b3e4f5a6b7c8d9e0f1a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c"
)

func TestParsePath(t *testing.T) {
	for _, tc := range []struct {
		name string
		path string
		want Cgroup
		ok   bool
	}{
		{"cgroupfs guaranteed", "/kubepods/pod" + uid + "/" + cid, Cgroup{uid, cid, "guaranteed"}, true},
		{"cgroupfs burstable", "/kubepods/burstable/pod" + uid + "/" + cid, Cgroup{uid, cid, "burstable"}, true},
		{"cgroupfs besteffort", "/kubepods/besteffort/pod" + uid + "/" + cid, Cgroup{uid, cid, "besteffort"}, true},
		{"cgroupfs cri-o", "/kubepods/burstable/pod" + uid + "/crio-" + cid, Cgroup{uid, cid, "burstable"}, true},
		{"cgroupfs nested cgroup below the container", "/kubepods/burstable/pod" + uid + "/" + cid + "/worker", Cgroup{uid, cid, "burstable"}, true},
		{"systemd guaranteed containerd", "/kubepods.slice/kubepods-pod" + uidU + ".slice/cri-containerd-" + cid + ".scope", Cgroup{uid, cid, "guaranteed"}, true},
		{"systemd burstable containerd", "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + uidU + ".slice/cri-containerd-" + cid + ".scope", Cgroup{uid, cid, "burstable"}, true},
		{"systemd besteffort cri-o", "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" + uidU + ".slice/crio-" + cid + ".scope", Cgroup{uid, cid, "besteffort"}, true},
		{"systemd docker", "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + uidU + ".slice/docker-" + cid + ".scope", Cgroup{uid, cid, "burstable"}, true},
		{"seen from inside a cgroup namespace", "/../../kubepods-burstable-pod" + uidU + ".slice/cri-containerd-" + cid + ".scope", Cgroup{uid, cid, "burstable"}, true},
		{"custom cgroup root (kind node)", "/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-burstable.slice/kubelet-kubepods-burstable-pod" + uidU + ".slice/cri-containerd-" + cid + ".scope", Cgroup{uid, cid, "burstable"}, true},
		{"kind node cgroupfs", "/kubelet/kubepods/burstable/pod" + uid + "/" + cid, Cgroup{uid, cid, "burstable"}, true},
		{"the pod's own cgroup (sandbox level)", "/kubepods/burstable/pod" + uid, Cgroup{}, false},
		{"cri-o conmon is no container", "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + uidU + ".slice/crio-conmon-" + cid + ".scope", Cgroup{}, false},
		{"cri-o conmon cgroupfs", "/kubepods/burstable/pod" + uid + "/crio-conmon-" + cid, Cgroup{}, false},
		{"host process", "/system.slice/containerd.service", Cgroup{}, false},
		{"root", "/", Cgroup{}, false},
		{"pod component under an unknown parent", "/mine/pod" + uid + "/" + cid, Cgroup{}, false},
		{"container ID not hex", "/kubepods/pod" + uid + "/not-a-container-id", Cgroup{}, false},
		{"pod UID not a UID", "/kubepods/podxyz/" + cid, Cgroup{}, false},
		{"systemd slice without pod", "/kubepods.slice/kubepods-burstable.slice/cri-containerd-" + cid + ".scope", Cgroup{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := ParsePath(tc.path)
			if ok != tc.ok {
				t.Fatalf("ParsePath(%q) ok = %v, want %v", tc.path, ok, tc.ok)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("ParsePath(%q) (-want +got):\n%s", tc.path, diff)
			}
		})
	}
}

func TestParseCgroupFile(t *testing.T) {
	for _, tc := range []struct {
		name, data string
		want       Cgroup
		err        string
	}{
		{name: "cgroup v1, every hierarchy", data: "12:pids:/kubepods/burstable/pod" + uid + "/" + cid + "\n11:memory:/kubepods/burstable/pod" + uid + "/" + cid + "\n0::/\n",
			want: Cgroup{uid, cid, "burstable"}},
		{name: "cgroup v2", data: "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + uidU + ".slice/cri-containerd-" + cid + ".scope\n",
			want: Cgroup{uid, cid, "burstable"}},
		{name: "hybrid: only the named hierarchy says", data: "1:name=systemd:/kubepods.slice/kubepods-pod" + uidU + ".slice/docker-" + cid + ".scope\n0::/\n",
			want: Cgroup{uid, cid, "guaranteed"}},
		{name: "host process", data: "0::/init.scope\n", err: ErrNotInPod.Error()},
		{name: "garbage", data: "nonsense\n", err: `cgroup line "nonsense": expected hierarchy-id:controllers:path`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseCgroupFile(tc.data)
			if tc.err != "" {
				if err == nil || err.Error() != tc.err {
					t.Fatalf("err = %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// FuzzParseCgroupFile: never panics, and what it returns is in the input
// (a UID with dashes or underscores, a container ID verbatim).
func FuzzParseCgroupFile(f *testing.F) {
	for _, s := range []string{
		"12:pids:/kubepods/burstable/pod" + uid + "/" + cid + "\n",
		"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + uidU + ".slice/cri-containerd-" + cid + ".scope\n",
		"0::/\n", "::", "1:x:/kubepods/pod/",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data string) {
		cg, err := ParseCgroupFile(data)
		if err != nil {
			return
		}
		if !strings.Contains(data, cg.ContainerID) || cg.ContainerID == "" {
			t.Errorf("container ID %q not in %q", cg.ContainerID, data)
		}
		if !strings.Contains(data, cg.PodUID) && !strings.Contains(data, strings.ReplaceAll(cg.PodUID, "-", "_")) {
			t.Errorf("pod UID %q not in %q", cg.PodUID, data)
		}
		if cg.QoS != "guaranteed" && cg.QoS != "burstable" && cg.QoS != "besteffort" {
			t.Errorf("QoS %q", cg.QoS)
		}
	})
}

func TestContainerIDs(t *testing.T) {
	pod := &corev1.Pod{Status: corev1.PodStatus{
		InitContainerStatuses: []corev1.ContainerStatus{{Name: "setup", ContainerID: "containerd://aaa"}},
		ContainerStatuses: []corev1.ContainerStatus{
			{Name: "main", ContainerID: "cri-o://bbb", LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ContainerID: "cri-o://ccc"}}},
			{Name: "waiting"},
		},
	}}
	want := map[string]string{"aaa": "setup", "bbb": "main", "ccc": "main"}
	if diff := cmp.Diff(want, ContainerIDs(pod)); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestOwnersFromFiles(t *testing.T) {
	root := t.TempDir()
	write := func(pid, data string) {
		if err := os.MkdirAll(filepath.Join(root, pid), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, pid, "cgroup"), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("100", "0::/kubepods/burstable/pod"+uid+"/"+cid+"\n")
	write("200", "0::/system.slice/containerd.service\n")
	write("300", "0::/kubepods/burstable/pod"+uid+"/"+strings.Repeat("e", 64)+"\n") // an ID no status names
	m := Mapper{ProcRoot: root, Names: func(podUID, id string) (string, bool) {
		if podUID == uid && id == cid {
			return "main", true
		}
		return "", false
	}}
	type res struct {
		Key string
		OK  bool
	}
	for _, tc := range []struct {
		name string
		pid  uint32
		want res
	}{
		{"container process", 100, res{uid + "/main", true}},
		{"host process", 200, res{}},
		{"unknown container", 300, res{}},
		{"gone", 400, res{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k, ok := m.Owners(tc.pid)
			if diff := cmp.Diff(tc.want, res{k, ok}); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}
