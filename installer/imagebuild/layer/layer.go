// Package layer writes reproducible image layers: the same entries give the
// same bytes, whatever the order they were listed in, the machine, its
// umask or the time. Entries are sorted by path, owned by the uid/gid they
// name (0 unless set), stamped with one fixed time, and every parent
// directory is present.
package layer

import (
	"archive/tar"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"sort"
	"strings"
	"time"
)

// Type is what an entry is.
type Type int

// The entry types a layer holds.
const (
	File Type = iota
	Dir
	Symlink
)

// Entry is one path of a layer.
type Entry struct {
	// Path inside the image, absolute ("/usr/local/bin/x") or relative to
	// the root ("usr/local/bin/x"); written without a leading slash.
	Path string
	Type Type
	// Mode holds the permission bits (setuid, setgid and sticky included);
	// 0 for a Dir means 0755, for a File 0644.
	Mode fs.FileMode
	Data []byte // File
	// Target is where a Symlink points.
	Target   string
	UID, GID int
}

// ErrDuplicate is returned when two entries name the same path.
var ErrDuplicate = errors.New("two entries name the same path")

// Tar writes entries as a tar archive, every time stamp set to mtime.
// Parent directories that no entry names are added (0755, root).
func Tar(entries []Entry, mtime time.Time) ([]byte, error) {
	byPath := map[string]Entry{}
	for _, e := range entries {
		p, err := clean(e.Path)
		if err != nil {
			return nil, err
		}
		e.Path = p
		if _, ok := byPath[p]; ok {
			return nil, fmt.Errorf("%w: %s (list it once)", ErrDuplicate, p)
		}
		byPath[p] = e
	}
	for p := range byPath {
		for d := path.Dir(p); d != "."; d = path.Dir(d) {
			if e, ok := byPath[d]; ok {
				if e.Type != Dir {
					return nil, fmt.Errorf("layer: %s is not a directory but %s is under it", d, p)
				}
				continue
			}
			byPath[d] = Entry{Path: d, Type: Dir}
		}
	}
	paths := make([]string, 0, len(byPath))
	for p := range byPath {
		paths = append(paths, p)
	}
	sort.Strings(paths)

	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	mtime = mtime.UTC().Truncate(time.Second)
	for _, p := range paths {
		hdr, data, err := header(byPath[p], mtime)
		if err != nil {
			return nil, err
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, fmt.Errorf("layer: %s: %w", p, err)
		}
		if _, err := tw.Write(data); err != nil {
			return nil, fmt.Errorf("layer: %s: %w", p, err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func header(e Entry, mtime time.Time) (*tar.Header, []byte, error) {
	h := &tar.Header{Name: e.Path, ModTime: mtime, Uid: e.UID, Gid: e.GID}
	perm := int64(e.Mode & (fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky))
	// tar keeps setuid/setgid/sticky as the classic octal bits.
	mode := int64(e.Mode.Perm())
	if e.Mode&fs.ModeSetuid != 0 {
		mode |= 0o4000
	}
	if e.Mode&fs.ModeSetgid != 0 {
		mode |= 0o2000
	}
	if e.Mode&fs.ModeSticky != 0 {
		mode |= 0o1000
	}
	switch e.Type {
	case Dir:
		h.Typeflag, h.Name = tar.TypeDir, e.Path+"/"
		if perm == 0 {
			mode = 0o755
		}
		if len(e.Data) > 0 || e.Target != "" {
			return nil, nil, fmt.Errorf("layer: directory %s has data or a link target", e.Path)
		}
	case File:
		h.Typeflag, h.Size = tar.TypeReg, int64(len(e.Data))
		if perm == 0 {
			mode = 0o644
		}
		if e.Target != "" {
			return nil, nil, fmt.Errorf("layer: file %s has a link target", e.Path)
		}
	case Symlink:
		h.Typeflag, h.Linkname, mode = tar.TypeSymlink, e.Target, 0o777
		if e.Target == "" || len(e.Data) > 0 {
			return nil, nil, fmt.Errorf("layer: symlink %s needs a target and no data", e.Path)
		}
	default:
		return nil, nil, fmt.Errorf("layer: %s: unknown entry type %d", e.Path, e.Type)
	}
	// The writer picks USTAR, or PAX where USTAR cannot hold a field (a long
	// name); mtime has whole seconds, so no PAX time record is written.
	h.Mode = mode
	return h, e.Data, nil
}

func clean(p string) (string, error) {
	c := path.Clean("/" + strings.TrimPrefix(p, "./"))
	if c == "/" || strings.Contains(p, "\x00") {
		return "", fmt.Errorf("layer: entry path %q names the root or is not a path", p)
	}
	return strings.TrimPrefix(c, "/"), nil
}

// FromTar reads the entries of a tar archive (a Debian package's data, from
// `dpkg-deb --fsys-tarfile`) that keep accepts, by cleaned path without a
// leading slash. Owners and modes are kept; times are not (Tar sets them).
// Hard links become copies of the file they name.
func FromTar(r io.Reader, keep func(path string) bool) ([]Entry, error) {
	tr := tar.NewReader(r)
	var out []Entry
	files := map[string][]byte{}
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("layer: reading tar: %w", err)
		}
		p := path.Clean(strings.TrimPrefix(strings.TrimPrefix(h.Name, "./"), "/"))
		if p == "." || !keep(p) {
			continue
		}
		e := Entry{Path: p, Mode: fs.FileMode(h.Mode).Perm(), UID: h.Uid, GID: h.Gid}
		if h.Mode&0o4000 != 0 {
			e.Mode |= fs.ModeSetuid
		}
		if h.Mode&0o2000 != 0 {
			e.Mode |= fs.ModeSetgid
		}
		if h.Mode&0o1000 != 0 {
			e.Mode |= fs.ModeSticky
		}
		switch h.Typeflag {
		case tar.TypeDir:
			e.Type = Dir
		case tar.TypeReg:
			data, err := io.ReadAll(tr)
			if err != nil {
				return nil, fmt.Errorf("layer: reading %s: %w", p, err)
			}
			e.Type, e.Data = File, data
			files[p] = data
		case tar.TypeSymlink:
			e.Type, e.Target = Symlink, h.Linkname
		case tar.TypeLink:
			target := path.Clean(strings.TrimPrefix(strings.TrimPrefix(h.Linkname, "./"), "/"))
			data, ok := files[target]
			if !ok {
				return nil, fmt.Errorf("layer: hard link %s names %s, which is not among the kept files before it", p, target)
			}
			e.Type, e.Data = File, data
		default:
			return nil, fmt.Errorf("layer: %s: tar entry type %q is not supported (files, directories and links only)", p, h.Typeflag)
		}
		out = append(out, e)
	}
}
