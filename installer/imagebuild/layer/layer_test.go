package layer

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"io/fs"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

type listed struct {
	Name   string
	Mode   int64
	UID    int
	Link   string
	Data   string
	MTimeS int64
}

func list(t *testing.T, data []byte) []listed {
	t.Helper()
	var out []listed
	tr := tar.NewReader(bytes.NewReader(data))
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(tr)
		out = append(out, listed{Name: h.Name, Mode: h.Mode, UID: h.Uid, Link: h.Linkname, Data: string(b), MTimeS: h.ModTime.Unix()})
	}
}

func TestTar(t *testing.T) {
	at := time.Unix(1700000000, 999) // sub-second part dropped
	tests := []struct {
		name    string
		entries []Entry
		want    []listed
		wantErr string
	}{
		{
			name: "sorted by path, parents added, default modes",
			entries: []Entry{
				{Path: "/usr/local/bin/b", Data: []byte("B"), Mode: 0o755},
				{Path: "etc/passwd", Data: []byte("P")},
				{Path: "/tmp", Type: Dir, Mode: 0o777 | fs.ModeSticky},
			},
			want: []listed{
				{Name: "etc/", Mode: 0o755, MTimeS: 1700000000},
				{Name: "etc/passwd", Mode: 0o644, Data: "P", MTimeS: 1700000000},
				{Name: "tmp/", Mode: 0o1777, MTimeS: 1700000000},
				{Name: "usr/", Mode: 0o755, MTimeS: 1700000000},
				{Name: "usr/local/", Mode: 0o755, MTimeS: 1700000000},
				{Name: "usr/local/bin/", Mode: 0o755, MTimeS: 1700000000},
				{Name: "usr/local/bin/b", Mode: 0o755, Data: "B", MTimeS: 1700000000},
			},
		},
		{
			name: "owner and symlink kept",
			entries: []Entry{
				{Path: "/home/nonroot", Type: Dir, Mode: 0o700, UID: 65532, GID: 65532},
				{Path: "/lib64/ld.so", Type: Symlink, Target: "/lib/ld.so"},
			},
			want: []listed{
				{Name: "home/", Mode: 0o755, MTimeS: 1700000000},
				{Name: "home/nonroot/", Mode: 0o700, UID: 65532, MTimeS: 1700000000},
				{Name: "lib64/", Mode: 0o755, MTimeS: 1700000000},
				{Name: "lib64/ld.so", Mode: 0o777, Link: "/lib/ld.so", MTimeS: 1700000000},
			},
		},
		{name: "same path twice", entries: []Entry{{Path: "/a"}, {Path: "a"}}, wantErr: "same path"},
		{name: "file under a file", entries: []Entry{{Path: "/a"}, {Path: "/a/b"}}, wantErr: "not a directory"},
		{name: "symlink without target", entries: []Entry{{Path: "/a", Type: Symlink}}, wantErr: "needs a target"},
		{name: "the root itself", entries: []Entry{{Path: "/", Type: Dir}}, wantErr: "names the root"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			data, err := Tar(tc.entries, at)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, list(t, data)); diff != "" {
				t.Errorf("layer (-want +got):\n%s", diff)
			}
		})
	}
}

// TestTarSameBytes: the order entries are listed in does not change a byte.
func TestTarSameBytes(t *testing.T) {
	a := []Entry{{Path: "/x/1", Data: []byte("1")}, {Path: "/y", Type: Dir}, {Path: "/x/2", Data: []byte("2")}}
	b := []Entry{a[2], a[0], a[1]}
	ta, err := Tar(a, time.Unix(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	tb, err := Tar(b, time.Unix(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(ta, tb) {
		t.Error("the same entries in another order gave other bytes")
	}
}

func TestFromTar(t *testing.T) {
	var src bytes.Buffer
	tw := tar.NewWriter(&src)
	for _, h := range []*tar.Header{
		{Name: "./lib/", Typeflag: tar.TypeDir, Mode: 0o755},
		{Name: "./lib/libc.so.6", Typeflag: tar.TypeReg, Mode: 0o755, Size: 4},
		{Name: "./lib/libc-copy.so", Typeflag: tar.TypeLink, Linkname: "./lib/libc.so.6"},
		{Name: "./lib64/ld.so", Typeflag: tar.TypeSymlink, Linkname: "/lib/ld.so"},
		{Name: "./usr/share/doc/x", Typeflag: tar.TypeReg, Mode: 0o644, Size: 1},
		{Name: "./usr/bin/su", Typeflag: tar.TypeReg, Mode: 0o4755, Size: 1},
	} {
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Size > 0 {
			tw.Write(bytes.Repeat([]byte("c"), int(h.Size)))
		}
	}
	tw.Close()
	got, err := FromTar(&src, func(p string) bool { return !strings.HasPrefix(p, "usr/share") })
	if err != nil {
		t.Fatal(err)
	}
	want := []Entry{
		{Path: "lib", Type: Dir, Mode: 0o755},
		{Path: "lib/libc.so.6", Type: File, Mode: 0o755, Data: []byte("cccc")},
		{Path: "lib/libc-copy.so", Type: File, Data: []byte("cccc")}, // a hard link: a copy
		{Path: "lib64/ld.so", Type: Symlink, Mode: 0, Target: "/lib/ld.so"},
		{Path: "usr/bin/su", Type: File, Mode: 0o755 | fs.ModeSetuid, Data: []byte("c")},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("entries (-want +got):\n%s", diff)
	}
}
