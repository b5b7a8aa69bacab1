package view

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/volcano-vgpu/volcano-vgpu/plugins/placement"
	"github.com/volcano-vgpu/volcano-vgpu/plugins/vgpu"
)

// The view assumes the scheduler plugin's default arguments (its
// configuration is not a published object); they must not drift apart.
func TestDefaultsAreTheSchedulers(t *testing.T) {
	a := vgpu.DefaultArgs()
	o := DefaultOptions(time.Time{})
	want := placement.Defaults{Cores: a.DefaultCores, DevicePolicy: a.DevicePolicy, Topology: a.Topology}
	if d := cmp.Diff(want, o.Defaults); d != "" {
		t.Errorf("placement defaults differ from vgpu.DefaultArgs (-scheduler +view):\n%s", d)
	}
	if o.StaleAfter != a.StaleAfter || o.Resources != a.Resources {
		t.Errorf("staleAfter %v, resources %+v; the scheduler's: %v, %+v", o.StaleAfter, o.Resources, a.StaleAfter, a.Resources)
	}
}
