package gpu_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/volcano-vgpu/volcano-vgpu/api"
	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/gpu"
)

func TestCreateMIG(t *testing.T) {
	at := func(start, size int) api.MIGPlacement { return api.MIGPlacement{Start: start, Size: size} }
	tests := []struct {
		name    string
		before  []api.MIGPlacement // 1g.5gb instances created first
		profile string
		at      api.MIGPlacement
		gpu     int
		wantErr []error // nil: created
		wantMsg string
	}{
		{name: "a 3g on the second half", profile: "3g.20gb", at: at(4, 4)},
		{name: "a 1g.10gb on slices 2-3", profile: "1g.10gb", at: at(2, 2)},
		{name: "over a 1g instance", before: []api.MIGPlacement{at(5, 1)}, profile: "3g.20gb", at: at(4, 4),
			wantErr: []error{gpu.ErrMIG, gpu.ErrMIGTaken}},
		{name: "a placement the profile does not have", profile: "3g.20gb", at: at(2, 4), wantErr: []error{gpu.ErrMIG},
			wantMsg: "creating the GPU instance: ERROR_INVALID_ARGUMENT"},
		{name: "a profile the GPU does not have", profile: "1g.12gb", at: at(0, 1), wantErr: []error{gpu.ErrMIG},
			wantMsg: "has no MIG profile 1g.12gb (it has [1g.5gb 2g.10gb 3g.20gb 4g.20gb 7g.40gb 1g.5gb+me 1g.10gb]"},
		{name: "on a GPU with MIG off", gpu: 1, profile: "1g.5gb", at: at(0, 1), wantErr: []error{gpu.ErrMIG},
			wantMsg: "has no MIG profile 1g.5gb (it has []; is its MIG mode on?)"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			sim, lib := migSim(t, "NVIDIA A100-SXM4-40GB", 40960)
			m := lib.(gpu.MIGManager)
			uuid := sim.Node().GPUs[tc.gpu].UUID
			for _, p := range tc.before {
				if _, err := m.CreateMIG(uuid, "1g.5gb", p); err != nil {
					t.Fatal(err)
				}
			}
			migUUID, err := m.CreateMIG(uuid, tc.profile, tc.at)
			if tc.wantErr != nil {
				for _, want := range tc.wantErr {
					if !errors.Is(err, want) {
						t.Errorf("CreateMIG = %v, want %v", err, want)
					}
				}
				if err != nil && !strings.Contains(err.Error(), tc.wantMsg) {
					t.Errorf("CreateMIG = %v, want it to say %q", err, tc.wantMsg)
				}
				state, _ := lib.MIG(uuid)
				if len(state.Instances) != len(tc.before) {
					t.Errorf("a failed create left instances: %+v", state.Instances)
				}
				return
			}
			if err != nil || !strings.HasPrefix(migUUID, "MIG-") {
				t.Fatalf("CreateMIG = %q, %v", migUUID, err)
			}
			state, err := lib.MIG(uuid)
			if err != nil {
				t.Fatal(err)
			}
			want := []api.MIGInstance{{Profile: tc.profile, Placement: tc.at, UUID: migUUID}}
			if d := cmp.Diff(want, state.Instances); d != "" {
				t.Errorf("instances after create (-want +got):\n%s", d)
			}
			// the simulated NVML numbers GPU instances from 1 (the created one
			// follows those made before) and the GPU's minor is its index
			wantIDs := gpu.MIGIDs{GI: len(tc.before) + 1, CI: 0}
			if got := state.IDs[migUUID]; got != wantIDs || state.Minor != tc.gpu || len(state.IDs) != len(tc.before)+1 {
				t.Errorf("minor %d, IDs %+v; want minor %d and %s at %+v", state.Minor, state.IDs, tc.gpu, migUUID, wantIDs)
			}
		})
	}
}

// Instances outlive the plugin: a new library on the same GPUs (a plugin
// restart) reads them back with their MIG UUIDs; destroying one in use is
// refused until its processes end.
func TestMIGAdoptAndDestroy(t *testing.T) {
	sim, lib := migSim(t, "NVIDIA A100-SXM4-40GB", 40960)
	uuid := sim.Node().GPUs[0].UUID
	at := api.MIGPlacement{Start: 0, Size: 4}
	migUUID, err := lib.(gpu.MIGManager).CreateMIG(uuid, "4g.20gb", at)
	if err != nil {
		t.Fatal(err)
	}
	restarted, err := gpu.New(sim)
	if err != nil {
		t.Fatal(err)
	}
	state, err := restarted.MIG(uuid)
	if err != nil || len(state.Instances) != 1 || state.Instances[0].UUID != migUUID {
		t.Fatalf("after a restart: %+v, %v; want the 4g.20gb instance %s", state.Instances, err, migUUID)
	}
	m := restarted.(gpu.MIGManager)
	if err := sim.RunOnMIG(migUUID, 7); err != nil {
		t.Fatal(err)
	}
	if err := m.DestroyMIG(uuid, at); !errors.Is(err, gpu.ErrMIGInUse) || !errors.Is(err, gpu.ErrMIG) {
		t.Errorf("DestroyMIG of an instance in use = %v, want ErrMIGInUse", err)
	}
	if state, _ := restarted.MIG(uuid); len(state.Instances) != 1 || !state.Instances[0].InUse {
		t.Errorf("the instance in use after a refused destroy: %+v", state.Instances)
	}
	if err := sim.StopOnMIG(migUUID, 7); err != nil {
		t.Fatal(err)
	}
	if err := m.DestroyMIG(uuid, at); err != nil {
		t.Fatalf("DestroyMIG = %v", err)
	}
	if state, _ := restarted.MIG(uuid); len(state.Instances) != 0 {
		t.Errorf("instances after destroy: %+v", state.Instances)
	}
	if err := m.DestroyMIG(uuid, at); !errors.Is(err, gpu.ErrMIGNotFound) {
		t.Errorf("DestroyMIG of nothing = %v, want ErrMIGNotFound", err)
	}
}
