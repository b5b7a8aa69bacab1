package procmap

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func TestMapsLibrary(t *testing.T) {
	const lib = "/usr/local/volcano-vgpu/libvcuda.so"
	withIno := Library{Path: lib, Major: 0xfd, Minor: 1, Inode: 393228}
	head := "55d0c0a00000-55d0c0a21000 r-xp 00000000 00:2f 1311 /usr/bin/python3.11\n" +
		"7f01b2000000-7f01b2400000 rw-p 00000000 00:00 0 \n" +
		"7f01b3200000-7f01b3300000 r-xp 00000000 00:2f 2051 /usr/lib/x86_64-linux-gnu/libc.so.6\n"
	for _, tc := range []struct {
		name string
		maps string
		lib  Library
		want bool
	}{
		{"preloaded at the container path", head +
			"7f01b3400000-7f01b3410000 r--p 00000000 fd:01 393228 " + lib + "\n" +
			"7f01b3410000-7f01b3440000 r-xp 00010000 fd:01 393228 " + lib + "\n", Library{Path: lib}, true},
		{"the host's copy replaced since the container started", head +
			"7f01b3410000-7f01b3440000 r-xp 00010000 fd:01 393228 " + lib + " (deleted)\n", Library{Path: lib}, true},
		{"no limiter: a static or musl program", head, withIno, false},
		{"the library's data mapped, not its code", head +
			"7f01b3400000-7f01b3410000 r--p 00000000 fd:01 393228 " + lib + "\n", Library{Path: lib}, false},
		{"a file of the tenant's own with the library's name elsewhere", head +
			"7f01b3410000-7f01b3440000 r-xp 00010000 00:2f 99 /tmp" + lib + "\n", withIno, false},
		{"the same name in the container's writable root, other inode", head +
			"7f01b3410000-7f01b3440000 r-xp 00010000 00:2f 99 /opt/libvcuda.so\n", withIno, false},
		{"the host file by inode, at another path (an emulated container's chroot)", head +
			"7f01b3410000-7f01b3440000 r-xp 00010000 fd:01 393228 /var/lib/emu/root" + lib + "\n", withIno, true},
		{"the same inode on another device", head +
			"7f01b3410000-7f01b3440000 r-xp 00010000 fd:02 393228 /var/lib/emu/root" + lib + "\n", withIno, false},
		{"a path with spaces", "7f01b3410000-7f01b3440000 r-xp 00010000 fd:01 7 /usr/local/volcano vgpu/libvcuda.so\n",
			Library{Path: "/usr/local/volcano vgpu/libvcuda.so"}, true},
		{"empty", "", withIno, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := MapsLibrary(tc.maps, tc.lib)
			if err != nil || got != tc.want {
				t.Errorf("MapsLibrary = %v, %v; want %v", got, err, tc.want)
			}
		})
	}
}

func TestMapsLibraryMalformed(t *testing.T) {
	for _, tc := range []struct{ name, maps, want string }{
		{"short line", "7f01-7f02 r-xp 0\n", "expected address, perms, offset, dev, inode"},
		{"bad inode", "7f01-7f02 r-xp 0 fd:01 x /other.so\n", `inode "x"`},
		{"bad device", "7f01-7f02 r-xp 0 fd01 7 /other.so\n", "expected major:minor in hex"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := MapsLibrary(tc.maps, Library{Path: "/l.so", Inode: 7})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want it to say %q", err, tc.want)
			}
		})
	}
}

// TestMapsOfThisProcess reads the kernel's own map of this test process:
// the Go runtime's executable is mapped to run, by path and by inode, and
// a library it never loaded is not.
func TestMapsOfThisProcess(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	exe, _ = filepath.EvalSymlinks(exe)
	m := Mapper{}
	pid := uint32(os.Getpid())
	byInode := StatLibrary(exe, "/nowhere/libvcuda.so")
	var st unix.Stat_t
	if err := unix.Stat(exe, &st); err != nil || byInode.Inode != st.Ino {
		t.Fatalf("StatLibrary(%s) = %+v (stat: %v)", exe, byInode, err)
	}
	for _, tc := range []struct {
		name string
		lib  Library
		want bool
	}{
		{"by path", Library{Path: exe}, true},
		{"by inode", byInode, true},
		{"not loaded", StatLibrary("/nonexistent", "/usr/local/volcano-vgpu/libvcuda.so"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := m.Maps(pid, tc.lib)
			if err != nil || got != tc.want {
				t.Errorf("Maps = %v, %v; want %v", got, err, tc.want)
			}
		})
	}
	if _, err := (Mapper{ProcRoot: t.TempDir()}).Maps(pid, byInode); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("pid %d", pid)) {
		t.Errorf("a pid without a maps file: err = %v", err)
	}
}

// BenchmarkMapsLibrary: one check of a large process's map, the library
// absent (the whole map read): 3000 mappings, about what a PyTorch process
// with CUDA loaded has.
func BenchmarkMapsLibrary(b *testing.B) {
	var sb strings.Builder
	for i := 0; i < 3000; i++ {
		fmt.Fprintf(&sb, "7f%010x-7f%010x r-xp 00000000 fd:01 %d /usr/lib/python3/site-packages/torch/lib/libtorch_part%d.so\n", i<<12, (i+1)<<12, 100000+i, i)
	}
	maps := sb.String()
	lib := Library{Path: "/usr/local/volcano-vgpu/libvcuda.so", Major: 0xfd, Minor: 1, Inode: 7}
	b.SetBytes(int64(len(maps)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if ok, err := MapsLibrary(maps, lib); ok || err != nil {
			b.Fatal(ok, err)
		}
	}
}
