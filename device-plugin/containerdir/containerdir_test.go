package containerdir

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
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

// TestControlFileCreatedOnceAndRefusedWhenForged: a control file, and the
// allowance the node wrote in it, survive a second Write (a container
// restart), in place; so does one made before the costs (version 1, a
// plugin upgraded under running pods). A symbolic link in its place is
// refused, not followed.
func TestControlFileCreatedOnceAndRefusedWhenForged(t *testing.T) {
	for _, version := range []uint32{api.ControlVersion, api.ControlVersionV1} {
		t.Run(fmt.Sprintf("version %d", version), func(t *testing.T) {
			s := Store{Root: t.TempDir()}
			rec := Record{PodUID: "uid-1", Namespace: "ns", Name: "p", Container: "main",
				Devices: []api.DeviceShare{{UUID: "GPU-00000000-0000-4000-8000-000000000001", MemoryMiB: 1024, Cores: 30}}}
			p, err := s.Write(rec, []byte("cfg"))
			if err != nil {
				t.Fatal(err)
			}
			b, err := os.ReadFile(p.Control)
			if err != nil {
				t.Fatal(err)
			}
			if err := api.CheckControl(b, 1); err != nil {
				t.Fatalf("fresh control file: %v", err)
			}
			api.PublishControl(b, 0, api.ControlDevice{Allowance: 42, Rate: 0.5, Mode: api.ControlLimited, PeriodUs: 100000})
			if version == api.ControlVersionV1 {
				b = b[:api.ControlFileSizeV1]
				binary.LittleEndian.PutUint32(b[4:], api.ControlVersionV1)
				binary.LittleEndian.PutUint32(b[8:], api.ControlFileSizeV1)
			}
			if err := os.WriteFile(p.Control, b, 0o644); err != nil {
				t.Fatal(err)
			}
			ino := inode(t, p.Control)
			if _, err := s.Write(rec, []byte("cfg")); err != nil {
				t.Fatal(err)
			}
			if got, _ := os.ReadFile(p.Control); string(got) != string(b) || inode(t, p.Control) != ino {
				t.Error("a second Write changed or replaced the control file")
			}
			if err := os.Remove(p.Control); err != nil {
				t.Fatal(err)
			}
			target := filepath.Join(t.TempDir(), "elsewhere")
			if err := os.WriteFile(target, b, 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(target, p.Control); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Write(rec, []byte("cfg")); err == nil {
				t.Error("Write accepted a symbolic link as the control file")
			}
		})
	}
}

func inode(t *testing.T, path string) uint64 {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return st.Sys().(*syscall.Stat_t).Ino
}

func TestWriteContainerPreloadInPlace(t *testing.T) {
	s := Store{Root: t.TempDir()}
	p, err := s.Paths("uid-1", "main")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(p.Dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := WriteContainerPreload(p, "/v/libvcuda.so"); err != nil {
		t.Fatal(err)
	}
	before, _ := os.Stat(p.Preload)
	// the hook appended the image's entries; a second Allocate rewrites the same file
	if err := os.WriteFile(p.Preload, []byte("/v/libvcuda.so\n/image/lib.so\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := WriteContainerPreload(p, "/v/libvcuda.so"); err != nil {
		t.Fatal(err)
	}
	after, _ := os.Stat(p.Preload)
	if b, _ := os.ReadFile(p.Preload); string(b) != "/v/libvcuda.so\n" {
		t.Errorf("preload = %q", b)
	}
	if !os.SameFile(before, after) {
		t.Error("the preload file was replaced; a container's bind mount would keep the old one")
	}
	if err := os.Remove(p.Preload); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc/hostname", p.Preload); err != nil {
		t.Fatal(err)
	}
	if err := WriteContainerPreload(p, "/v/libvcuda.so"); err == nil {
		t.Error("wrote through a symbolic link")
	}
}
