package vgpu

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"volcano.sh/volcano/pkg/scheduler/conf"

	"github.com/volcano-vgpu/volcano-vgpu/api"
	"github.com/volcano-vgpu/volcano-vgpu/plugins/placement"
)

func TestParseArgs(t *testing.T) {
	tests := []struct {
		name    string
		raw     map[string]any
		want    func(a *Args)
		wantErr []string
	}{
		{name: "defaults", raw: nil},
		{
			name: "all set, YAML types",
			raw: map[string]any{argDevicePolicy: "spread", argNodePolicy: "spread", argTopology: "required",
				argDefaultCores: 10, argWeight: 2.5, argStaleAfter: "90s", argResourceNumber: "example.com/vgpu"},
			want: func(a *Args) {
				a.DevicePolicy, a.NodePolicy, a.Topology = placement.Spread, placement.Spread, placement.TopologyRequired
				a.DefaultCores, a.Weight, a.StaleAfter, a.Resources.Number = 10, 2.5, 90*time.Second, "example.com/vgpu"
			},
		},
		{
			name:    "every problem at once",
			raw:     map[string]any{argDevicePolicy: "pack", argDefaultCores: 150, argStaleAfter: "1s", "vgpu.wieght": 3},
			wantErr: []string{`vgpu.devicePolicy: expected one of binpack, spread, got "pack"`, "vgpu.defaultCores: expected an integer percentage from 0 to 100, got 150", "vgpu.staleAfter: expected a duration of at least 10s", "vgpu.wieght: unknown argument"},
		},
		{name: "fractional cores", raw: map[string]any{argDefaultCores: 2.5}, wantErr: []string{"vgpu.defaultCores"}},
		{name: "numbers as strings", raw: map[string]any{argDefaultCores: "20", argWeight: " 3 "},
			want: func(a *Args) { a.DefaultCores, a.Weight = 20, 3 }},
		{name: "case and space in names", raw: map[string]any{argDevicePolicy: " Spread", argTopology: "REQUIRED"},
			want: func(a *Args) { a.DevicePolicy, a.Topology = placement.Spread, placement.TopologyRequired }},
		{name: "not a number", raw: map[string]any{argWeight: "heavy"}, wantErr: []string{"vgpu.weight: expected a number, got heavy"}},
		{name: "clashing resource names", raw: map[string]any{argResourceCores: api.DefaultResourceMemory}, wantErr: []string{"expected distinct names"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseArgs(tc.raw)
			if len(tc.wantErr) > 0 {
				if err == nil {
					t.Fatal("no error")
				}
				for _, w := range tc.wantErr {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q lacks %q", err, w)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			want := DefaultArgs()
			if tc.want != nil {
				tc.want(&want)
			}
			if d := cmp.Diff(want, got); d != "" {
				t.Errorf("(-want +got):\n%s", d)
			}
		})
	}
}

func TestArgKeys(t *testing.T) {
	want := []string{argDevicePolicy, argNodePolicy, argTopology, argDefaultCores, argWeight, argStaleAfter,
		argResourceNumber, argResourceMemory, argResourceMemPct, argResourceCores}
	if d := cmp.Diff(want, knownArgs()); d != "" {
		t.Errorf("argument keys (-consts +fields):\n%s", d)
	}
}

func TestCheckTiers(t *testing.T) {
	tier := func(opts ...conf.PluginOption) []conf.Tier { return []conf.Tier{{Plugins: opts}} }
	warnings, err := CheckTiers(tier(conf.PluginOption{Name: "deviceshare", Arguments: map[string]any{"deviceshare.VGPUEnable": true}}, conf.PluginOption{Name: PluginName}))
	if err != nil || len(warnings) != 1 || !strings.Contains(warnings[0], "book the same GPUs twice") {
		t.Errorf("deviceshare VGPUEnable beside vgpu: warnings %v, err %v", warnings, err)
	}
	if _, err := CheckTiers(tier(conf.PluginOption{Name: PluginName, Arguments: map[string]any{"vgpu.colour": 1}})); err == nil {
		t.Error("unknown key accepted")
	}
	if w, _ := CheckTiers(tier(conf.PluginOption{Name: "gang"})); len(w) != 1 || !strings.Contains(w[0], "not enabled") {
		t.Errorf("vgpu missing: warnings %v", w)
	}
}

func container(name string, res map[string]int64) corev1.Container {
	l := corev1.ResourceList{}
	for k, v := range res {
		l[corev1.ResourceName(k)] = *resource.NewQuantity(v, resource.DecimalSI)
	}
	return corev1.Container{Name: name, Resources: corev1.ResourceRequirements{Limits: l}}
}

func sidecar(c corev1.Container) corev1.Container {
	always := corev1.ContainerRestartPolicyAlways
	c.RestartPolicy = &always
	return c
}

func TestRequestOf(t *testing.T) {
	a := DefaultArgs()
	a.DefaultCores = 20
	num, mem, pct, cores := api.DefaultResourceNumber, api.DefaultResourceMemory, api.DefaultResourceMemoryPercentage, api.DefaultResourceCores
	tests := []struct {
		name    string
		pod     corev1.Pod
		want    *placement.Request
		wantErr string
	}{
		{name: "no GPU", pod: corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{container("c", nil)}}}},
		{
			name: "init and app containers, default cores",
			pod: corev1.Pod{Spec: corev1.PodSpec{
				InitContainers: []corev1.Container{container("setup", map[string]int64{num: 1, pct: 10})},
				Containers:     []corev1.Container{container("main", map[string]int64{num: 2, mem: 8192, cores: 30}), container("side", map[string]int64{num: 1})},
			}},
			want: &placement.Request{Containers: []placement.Container{
				{Name: "setup", Init: true, Number: 1, MemoryPercent: 10},
				{Name: "main", Number: 2, MemoryMiB: 8192, Cores: 30},
				{Name: "side", Number: 1, Cores: 20}, // neither memory nor cores: default 20%
			}, DevicePolicy: placement.Binpack, Topology: placement.TopologyPrefer},
		},
		{
			name: "native sidecar: an init container with restartPolicy Always",
			pod: corev1.Pod{Spec: corev1.PodSpec{
				InitContainers: []corev1.Container{sidecar(container("proxy", map[string]int64{num: 1, mem: 2048, cores: 10})),
					container("setup", map[string]int64{num: 1, mem: 1024, cores: 10})},
				Containers: []corev1.Container{container("main", map[string]int64{num: 1, mem: 8192, cores: 30})},
			}},
			want: &placement.Request{Containers: []placement.Container{
				{Name: "proxy", Init: true, Restartable: true, Number: 1, MemoryMiB: 2048, Cores: 10},
				{Name: "setup", Init: true, Number: 1, MemoryMiB: 1024, Cores: 10},
				{Name: "main", Number: 1, MemoryMiB: 8192, Cores: 30},
			}, DevicePolicy: placement.Binpack, Topology: placement.TopologyPrefer},
		},
		{
			name: "annotations",
			pod: corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{api.GPUTypeIncludeKey: "A100", api.TopologyKey: "required", api.DevicePolicyKey: "spread"}},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{container("main", map[string]int64{num: 1, mem: 1024})}},
			},
			want: &placement.Request{Containers: []placement.Container{{Name: "main", Number: 1, MemoryMiB: 1024}},
				TypeInclude: []string{"A100"}, Topology: placement.TopologyRequired, DevicePolicy: placement.Spread},
		},
		{name: "memory without number", pod: corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{container("main", map[string]int64{mem: 1024})}}},
			wantErr: `container "main" asks volcano.sh/vgpu-memory without volcano.sh/vgpu-number (Volcano deviceshare reads that as 1 GPU): add volcano.sh/vgpu-number: 1`},
		{name: "cores without number", pod: corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{container("main", map[string]int64{cores: 10})}}},
			wantErr: `container "main" asks volcano.sh/vgpu-memory-percentage/volcano.sh/vgpu-cores without volcano.sh/vgpu-number: add volcano.sh/vgpu-number`},
		{name: "cores over 100", pod: corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{container("main", map[string]int64{num: 1, cores: 150})}}},
			wantErr: "volcano.sh/vgpu-cores=150, expected 0 to 100"},
		{name: "bad annotation", pod: corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{api.TopologyKey: "nvlink"}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{container("main", map[string]int64{num: 1})}}},
			wantErr: api.TopologyKey + ": expected one of prefer, required, none"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, _, err := requestOf(&tc.pod, &a)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("(-want +got):\n%s", d)
			}
		})
	}
}

func TestAssignmentRoundTrip(t *testing.T) {
	pl := placement.Placement{Node: "n1", Containers: []placement.ContainerPlacement{
		{Name: "setup", Init: true, Devices: []placement.Device{{Pos: 0, UUID: "GPU-a", MemoryMiB: 100, Cores: 10}}},
		{Name: "nogpu"},
		{Name: "proxy", Init: true, Restartable: true, Devices: []placement.Device{{Pos: 0, UUID: "GPU-a", MemoryMiB: 300, Cores: 5}}},
		{Name: "main", Devices: []placement.Device{{Pos: 1, UUID: "GPU-b", MemoryMiB: 200, Cores: 100}}},
	}}
	a := toAssignment(pl, "uid-1")
	if len(a.Containers) != 3 {
		t.Fatalf("containers without GPUs must be left out: %+v", a.Containers)
	}
	back := fromAssignment(a)
	if back.Containers[2].Devices[0].UUID != "GPU-b" || !back.Containers[0].Init || back.Containers[0].Restartable ||
		!back.Containers[1].Init || !back.Containers[1].Restartable {
		t.Errorf("round trip: %+v", back)
	}
}

func TestInflightExpires(t *testing.T) {
	now := testNow
	f := NewInflight(func() time.Time { return now }, time.Minute)
	f.Put("u1", api.Assignment{Node: "n1"}, "v1")
	if _, ok := f.Get("u1"); !ok {
		t.Fatal("fresh entry missing")
	}
	now = now.Add(2 * time.Minute)
	if _, ok := f.Get("u1"); ok {
		t.Error("expired entry returned")
	}
	f.Expire()
	if f.Len() != 0 {
		t.Errorf("Len = %d after Expire", f.Len())
	}
}
