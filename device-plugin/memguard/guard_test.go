package memguard

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func tenant(key string, capMiB int64, ctx uint32) Tenant {
	return Tenant{Key: key, PodUID: key, Namespace: "ns", Pod: key, Container: "main", UUID: "GPU-0", CapMiB: capMiB, ContextMiB: ctx}
}

func proc(pid uint32, mib uint64) Process { return Process{PID: pid, UsedBytes: mib * MiB} }

func TestDecide(t *testing.T) {
	owners := map[uint32]string{10: "a", 11: "a", 12: "a", 20: "b", 21: "b"}
	owner := func(pid uint32) (string, bool) { k, ok := owners[pid]; return k, ok }
	pol := Policy{ToleranceMiB: 64, UncountedContextMiB: 512}
	a8, b4 := tenant("a", 8192, 0), tenant("b", 4096, 0)
	actx := tenant("a", 8192, 300)
	for _, tc := range []struct {
		name    string
		procs   []Process
		tenants map[string]Tenant
		pol     Policy
		want    Verdict
	}{
		{
			name:    "within the cap: nothing to do", // 6000 + 2000 = 8000 ≤ 8192 + 2×512 + 64
			procs:   []Process{proc(10, 6000), proc(11, 2000)},
			tenants: map[string]Tenant{"a": a8}, pol: pol,
			want: Verdict{Holdings: []Holding{{Tenant: a8, HeldBytes: 8000 * MiB, Processes: 2, LimitBytes: 9280 * MiB}}},
		},
		{
			name:    "files removed: a third process took a whole cap more, the largest dies", // 14192 > 8192 + 3×512 + 64 = 9792
			procs:   []Process{proc(10, 6000), proc(11, 2000), proc(12, 8192)},
			tenants: map[string]Tenant{"a": a8}, pol: pol,
			want: Verdict{
				Holdings: []Holding{{Tenant: a8, HeldBytes: 16192 * MiB, Processes: 3, LimitBytes: 9792 * MiB}},
				Kills:    []Kill{{PID: 12, ProcessBytes: 8192 * MiB, Holding: Holding{Tenant: a8, HeldBytes: 16192 * MiB, Processes: 3, LimitBytes: 9792 * MiB}}},
			},
		},
		{
			name:    "two kills when one is not enough", // 18100 > 8192: the newer of two equal holders (11) first, then 10; 100 fits
			procs:   []Process{proc(10, 9000), proc(11, 9000), proc(12, 100)},
			tenants: map[string]Tenant{"a": a8}, pol: Policy{},
			want: Verdict{
				Holdings: []Holding{{Tenant: a8, HeldBytes: 18100 * MiB, Processes: 3, LimitBytes: 8192 * MiB}},
				Kills: []Kill{
					{PID: 11, ProcessBytes: 9000 * MiB, Holding: Holding{Tenant: a8, HeldBytes: 18100 * MiB, Processes: 3, LimitBytes: 8192 * MiB}},
					{PID: 10, ProcessBytes: 9000 * MiB, Holding: Holding{Tenant: a8, HeldBytes: 9100 * MiB, Processes: 2, LimitBytes: 8192 * MiB}},
				},
			},
		},
		{
			name:    "booked contexts count per process", // 8192 + 2×300 + 64 = 8856 ≥ 8800
			procs:   []Process{proc(10, 4400), proc(11, 4400)},
			tenants: map[string]Tenant{"a": actx}, pol: pol,
			want: Verdict{Holdings: []Holding{{Tenant: actx, HeldBytes: 8800 * MiB, Processes: 2, LimitBytes: 8856 * MiB}}},
		},
		{
			name:    "one MiB over the limit is over", // 8192 + 64 = 8256 < 8257
			procs:   []Process{proc(20, 4096), proc(21, 4161)},
			tenants: map[string]Tenant{"b": b4}, pol: Policy{ToleranceMiB: 64},
			want: Verdict{
				Holdings: []Holding{{Tenant: b4, HeldBytes: 8257 * MiB, Processes: 2, LimitBytes: 4160 * MiB}},
				Kills: []Kill{
					{PID: 21, ProcessBytes: 4161 * MiB, Holding: Holding{Tenant: b4, HeldBytes: 8257 * MiB, Processes: 2, LimitBytes: 4160 * MiB}},
				},
			},
		},
		{
			name:    "the honest neighbour is not touched",
			procs:   []Process{proc(10, 16000), proc(20, 4000)},
			tenants: map[string]Tenant{"a": a8, "b": b4}, pol: pol,
			want: Verdict{
				Holdings: []Holding{
					{Tenant: a8, HeldBytes: 16000 * MiB, Processes: 1, LimitBytes: 8768 * MiB},
					{Tenant: b4, HeldBytes: 4000 * MiB, Processes: 1, LimitBytes: 4672 * MiB},
				},
				Kills: []Kill{{PID: 10, ProcessBytes: 16000 * MiB, Holding: Holding{Tenant: a8, HeldBytes: 16000 * MiB, Processes: 1, LimitBytes: 8768 * MiB}}},
			},
		},
		{
			name:    "processes of no tenant on this GPU are left alone, reported",
			procs:   []Process{proc(99, 40000), proc(20, 100)},
			tenants: map[string]Tenant{"a": a8}, pol: pol, // b has no allocation on this GPU
			want: Verdict{Unowned: []Process{proc(99, 40000), proc(20, 100)}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Decide(tc.procs, owner, tc.tenants, tc.pol)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Decide (-want +got):\n%s", diff)
			}
		})
	}
}
