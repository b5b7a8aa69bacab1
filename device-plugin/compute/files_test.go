package compute

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"

	"github.com/volcano-vgpu/volcano-vgpu/api"
)

// TestOpenControlVersions: the controller writes a container's control file
// at the version it was made with: the current one with the cost per unit,
// a version 1 one (a container started before the costs) as it is, without;
// any other size is refused, naming both.
func TestOpenControlVersions(t *testing.T) {
	d := api.ControlDevice{Allowance: 42, Rate: 0.5, Mode: api.ControlLimited, PeriodUs: 100000, Cost: 0.835}
	cur, _ := api.NewControl(1)
	v1 := append([]byte(nil), cur[:api.ControlFileSizeV1]...)
	binary.LittleEndian.PutUint32(v1[4:], api.ControlVersionV1)
	binary.LittleEndian.PutUint32(v1[8:], api.ControlFileSizeV1)
	tests := []struct {
		name     string
		file     []byte
		wantCost float64
		wantErr  bool
	}{
		{name: "current", file: cur, wantCost: 0.835},
		{name: "version 1", file: v1, wantCost: 0},
		{name: "truncated", file: cur[:100], wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), api.ControlFile)
			if err := os.WriteFile(path, tt.file, 0o644); err != nil {
				t.Fatal(err)
			}
			m, err := openControl(path, 1)
			if tt.wantErr {
				if err == nil {
					m.close()
					t.Fatal("accepted")
				}
				t.Logf("refused: %v", err)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			api.PublishControl(m.b, 0, d)
			if err := m.close(); err != nil {
				t.Fatal(err)
			}
			b, _ := os.ReadFile(path)
			if len(b) != len(tt.file) {
				t.Fatalf("the file is %d bytes now, was %d", len(b), len(tt.file))
			}
			got, _ := api.ReadControl(b, 0)
			want := d
			want.Cost = tt.wantCost
			if got != want {
				t.Errorf("read back %+v, want %+v", got, want)
			}
		})
	}
}
