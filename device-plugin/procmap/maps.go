package procmap

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Library is the limiter's shared object as a process's memory map shows
// it: its path inside the container and, where the node knows it, the
// device and inode of the file (a bind mount keeps both).
type Library struct {
	// Path inside containers (limiter.containerLibrary). /proc/<pid>/maps
	// of a container's process, read from the host, names files by their
	// path in the container's mount namespace, so this is what an exact
	// match compares; a tenant cannot put a file of its own there (the
	// runtime's read-only bind mount is).
	Path string
	// Major, Minor and Inode of the host's copy (0 Inode: unknown). A file
	// the tenant made has another inode, whatever its name.
	Major, Minor uint32
	Inode        uint64
}

// StatLibrary returns the Library of the file at hostPath, mounted at
// containerPath in containers. A host file that cannot be read leaves the
// inode unknown (only the path is compared).
func StatLibrary(hostPath, containerPath string) Library {
	lib := Library{Path: containerPath}
	var st unix.Stat_t
	if hostPath != "" && unix.Stat(hostPath, &st) == nil {
		lib.Major, lib.Minor, lib.Inode = unix.Major(st.Dev), unix.Minor(st.Dev), st.Ino
	}
	return lib
}

// MapsLibrary reports whether maps (the contents of /proc/<pid>/maps) holds
// an executable mapping of lib: its path (also as " (deleted)", the host's
// copy replaced since the container started) or its device and inode.
func MapsLibrary(maps string, lib Library) (bool, error) {
	for rest := maps; rest != ""; {
		var line string
		line, rest, _ = strings.Cut(rest, "\n")
		// address perms offset dev inode [path]; the path may hold spaces
		var f [5]string
		tail, n := line, 0
		for ; n < len(f); n++ {
			tail = strings.TrimLeft(tail, " \t")
			if tail == "" {
				break
			}
			i := strings.IndexAny(tail, " \t")
			if i < 0 {
				i = len(tail)
			}
			f[n], tail = tail[:i], tail[i:]
		}
		if n == 0 {
			continue
		}
		if n < len(f) {
			return false, fmt.Errorf("maps line %q: expected address, perms, offset, dev, inode and a path", line)
		}
		path := strings.TrimSpace(tail)
		if path == "" || !strings.Contains(f[1], "x") {
			continue
		}
		if lib.Path != "" && strings.TrimSuffix(path, " (deleted)") == lib.Path {
			return true, nil
		}
		if lib.Inode == 0 {
			continue
		}
		ino, err := strconv.ParseUint(f[4], 10, 64)
		if err != nil {
			return false, fmt.Errorf("maps line %q: inode %q: %w", line, f[4], err)
		}
		if ino != lib.Inode {
			continue
		}
		maj, min, ok := strings.Cut(f[3], ":")
		ma, err1 := strconv.ParseUint(maj, 16, 32)
		mi, err2 := strconv.ParseUint(min, 16, 32)
		if !ok || err1 != nil || err2 != nil {
			return false, fmt.Errorf("maps line %q: device %q: expected major:minor in hex", line, f[3])
		}
		if uint32(ma) == lib.Major && uint32(mi) == lib.Minor {
			return true, nil
		}
	}
	return false, nil
}

// Maps reports whether the host process hostPID has lib mapped to run.
// Reading another user's /proc/<pid>/maps takes CAP_SYS_PTRACE.
func (m Mapper) Maps(hostPID uint32, lib Library) (bool, error) {
	root := m.ProcRoot
	if root == "" {
		root = "/proc"
	}
	b, err := os.ReadFile(filepath.Join(root, strconv.FormatUint(uint64(hostPID), 10), "maps"))
	if err != nil {
		return false, fmt.Errorf("pid %d: %w (the device plugin reads a GPU process's memory map with hostPID; another user's needs CAP_SYS_PTRACE)", hostPID, err)
	}
	return MapsLibrary(string(b), lib)
}
