package containerdir

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/volcano-vgpu/volcano-vgpu/api"
)

func TestWriteAndReadBack(t *testing.T) {
	s := Store{Root: t.TempDir()}
	rec := Record{PodUID: "3f1c-uid", Namespace: "ns", Name: "p", Container: "main", Index: 1, IDs: []string{"GPU-a::0"},
		Devices: []api.DeviceShare{{UUID: "GPU-a", MemoryMiB: 1024, Cores: 10}}, ComputePolicy: api.ComputeFixed, Time: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	p, err := s.Write(rec, []byte("cfg"))
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(p.Config); string(b) != "cfg" {
		t.Errorf("config = %q", b)
	}
	if st, err := os.Stat(p.Config); err != nil || st.Mode().Perm() != 0o444 {
		t.Errorf("config mode: %v %v", st.Mode(), err)
	}
	got, err := s.Records()
	if err != nil {
		t.Fatal(err)
	}
	rec.Version = RecordVersion
	if d := cmp.Diff([]Record{rec}, got); d != "" {
		t.Errorf("records (-want +got):\n%s", d)
	}
}

func TestPathsRefuseEscapes(t *testing.T) {
	s := Store{Root: "/state"}
	for _, tc := range []struct{ uid, container, want string }{
		{"../etc", "main", "pod UID"},
		{"uid", "../../x", "container name"},
		{"uid", "Main", "container name"},
		{"", "main", "pod UID"},
	} {
		if _, err := s.Paths(tc.uid, tc.container); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Paths(%q, %q) err = %v, want %q", tc.uid, tc.container, err, tc.want)
		}
	}
}

func TestGC(t *testing.T) {
	s := Store{Root: t.TempDir()}
	for _, uid := range []string{"live", "gone", "young"} {
		if _, err := s.Write(Record{PodUID: uid, Container: "c"}, nil); err != nil {
			t.Fatal(err)
		}
	}
	old := time.Now().Add(-time.Hour)
	for _, uid := range []string{"live", "gone"} {
		if err := os.Chtimes(filepath.Join(s.Root, "containers", uid), old, old); err != nil {
			t.Fatal(err)
		}
	}
	removed, err := s.GC(func(uid string) bool { return uid == "live" }, time.Minute, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]string{"gone"}, removed); d != "" {
		t.Errorf("removed (-want +got):\n%s", d) // "young" is not a minute old yet
	}
}
