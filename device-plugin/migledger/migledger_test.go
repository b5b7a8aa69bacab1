package migledger

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/volcano-vgpu/volcano-vgpu/api"
)

func TestLedgerRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), File)
	l, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	a := Entry{GPU: "GPU-b", Profile: "1g.5gb", Placement: api.MIGPlacement{Start: 6, Size: 1}, UUID: "MIG-1", PodUID: "p1", Created: true}
	b := Entry{GPU: "GPU-a", Profile: "3g.20gb", Placement: api.MIGPlacement{Start: 4, Size: 4}, UUID: "MIG-2", PodUID: "p2"}
	c := Entry{GPU: "GPU-b", Profile: "1g.5gb", Placement: api.MIGPlacement{Start: 0, Size: 1}, UUID: "MIG-3", PodUID: "p3", Created: true}
	for _, e := range []Entry{a, b, c} {
		if err := l.Put(e); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Delete(b.Key()); err != nil {
		t.Fatal(err)
	}
	back, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	// sorted by GPU, then the placement's first slice: c (0) before a (6)
	if d := cmp.Diff([]Entry{c, a}, back.Entries()); d != "" {
		t.Errorf("entries read back (-want +got):\n%s", d)
	}
	if _, ok := back.Get(b.Key()); ok {
		t.Error("the deleted entry came back")
	}
}

func TestLoadRefusesBadFiles(t *testing.T) {
	for _, tc := range []struct{ name, content, want string }{
		{"other version", `{"version":"v2","instances":[]}`, `field version: expected v1, got "v2" (remove the file`},
		{"unknown field", `{"version":"v1","instances":[],"extra":1}`, `unknown field "extra"`},
		{"instance without placement", `{"version":"v1","instances":[{"gpu":"GPU-a","placement":{"start":0,"size":0}}]}`, "instances[0]: expected a GPU and a placement"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), File)
			if err := os.WriteFile(path, []byte(tc.content), 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := Load(path)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Load = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

func TestPutKeepsMemoryWhenTheFileCannotBeWritten(t *testing.T) {
	dir := t.TempDir()
	l, err := Load(filepath.Join(dir, "sub", File))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "sub"), nil, 0o644); err != nil { // a file where the directory goes
		t.Fatal(err)
	}
	e := Entry{GPU: "GPU-a", Profile: "1g.5gb", Placement: api.MIGPlacement{Start: 0, Size: 1}}
	if err := l.Put(e); err == nil {
		t.Fatal("Put succeeded without a directory to write to")
	}
	if _, ok := l.Get(e.Key()); ok {
		t.Error("an entry that was not saved is kept")
	}
}
