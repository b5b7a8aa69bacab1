package atomicfile

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

func TestWrite(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state.json")
	tests := []struct {
		name string
		data string
		mode fs.FileMode
	}{
		{name: "creates the file", data: "one", mode: 0o644},
		{name: "replaces it with new content and mode", data: "two, longer", mode: 0o600},
		{name: "replaces it with an empty file", data: "", mode: 0o640},
	}
	for _, tc := range tests {
		if err := Write(path, []byte(tc.data), tc.mode); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		got, err := os.ReadFile(path)
		if err != nil || string(got) != tc.data {
			t.Errorf("%s: content %q, %v; want %q", tc.name, got, err, tc.data)
		}
		if st, _ := os.Stat(path); st.Mode().Perm() != tc.mode {
			t.Errorf("%s: mode %v, want %v", tc.name, st.Mode().Perm(), tc.mode)
		}
		entries, _ := os.ReadDir(dir)
		if len(entries) != 1 {
			t.Errorf("%s: %d entries in the directory, want only the file (no temporary left)", tc.name, len(entries))
		}
	}
}

func TestWriteIntoMissingDirectoryFails(t *testing.T) {
	err := Write(filepath.Join(t.TempDir(), "missing", "f"), []byte("x"), 0o644)
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("err = %v, want not exist", err)
	}
}

func TestWriteKeepsOldContentWhenRenameFails(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "target")
	if err := os.Mkdir(path, 0o755); err != nil { // a directory cannot be replaced by a file
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(path, "keep"), []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := Write(path, []byte("new"), 0o644); err == nil {
		t.Fatal("renaming a file over a non-empty directory succeeded")
	}
	if got, _ := os.ReadFile(filepath.Join(path, "keep")); string(got) != "old" {
		t.Errorf("old content lost: %q", got)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("%d entries, want the temporary removed", len(entries))
	}
}

func BenchmarkWrite(b *testing.B) {
	path := filepath.Join(b.TempDir(), "record.json")
	data := make([]byte, 512)
	b.ReportAllocs()
	for b.Loop() {
		if err := Write(path, data, 0o644); err != nil {
			b.Fatal(err)
		}
	}
}
