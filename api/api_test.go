package api

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

var t0 = time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)

func pairInventory() Inventory {
	return Inventory{
		Heartbeat: t0,
		GPUs: []GPU{
			{Index: 0, UUID: "GPU-0000", Model: "A100-SXM4-40GB", MemoryMiB: 40960, Healthy: true, NUMA: 0, MaxShares: 10},
			{Index: 1, UUID: "GPU-0001", Model: "A100-SXM4-40GB", MemoryMiB: 40960, Healthy: true, NUMA: 0, MaxShares: 10, Mode: ModeMPS},
		},
		NVLinks: [][]int{{0, 12}, {12, 0}},
		PCIe:    [][]PCIeLevel{{PCIeInternal, PCIeNode}, {PCIeNode, PCIeInternal}},
	}
}

func sampleAssignment() Assignment {
	return Assignment{
		PodUID: "3f1c-uid", Node: "a100-40g-0", Time: t0, Phase: PhaseAssigned,
		Containers: []ContainerAssignment{
			{Name: "setup", Init: true, Devices: []DeviceShare{{UUID: "GPU-0000", MemoryMiB: 1024, Cores: 10}}},
			{Name: "proxy", Init: true, Restartable: true, Devices: []DeviceShare{{UUID: "GPU-0002", MemoryMiB: 512, Cores: 5}}},
			{Name: "main", Devices: []DeviceShare{{UUID: "GPU-0000", MemoryMiB: 8192, Cores: 30}, {UUID: "GPU-0001", MemoryMiB: 8192, Cores: 30}}},
		},
	}
}

func TestInventoryRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		in   func() Inventory
	}{
		{name: "two linked GPUs", in: pairInventory},
		{name: "one of them in MIG mode", in: migInventory},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in := tc.in()
			s, err := EncodeInventory(in)
			if err != nil {
				t.Fatal(err)
			}
			out, err := DecodeInventory(s)
			if err != nil {
				t.Fatal(err)
			}
			in.Version = Version
			if d := cmp.Diff(in, out); d != "" {
				t.Errorf("round trip (-in +out):\n%s", d)
			}
			if got := out.Link(0, 1); got != (Link{NVLinks: 12, PCIe: PCIeNode}) {
				t.Errorf("Link(0,1) = %+v", got)
			}
		})
	}
}

func TestDecodeInventoryErrors(t *testing.T) {
	good, _ := EncodeInventory(pairInventory())
	tests := []struct {
		name  string
		value string
		want  string // substring of the error
	}{
		{"empty", "", "expected a JSON object"},
		{"not JSON", "{", "expected a valid JSON object"},
		{"wrong version", strings.Replace(good, `"v1"`, `"v9"`, 1), `field version: expected "v1"`},
		{"unknown field", strings.Replace(good, `"gpus"`, `"extra":1,"gpus"`, 1), `unknown field "extra"`},
		{"memory as string", strings.Replace(good, `"memoryMiB":40960`, `"memoryMiB":"40960"`, 1), "field gpus.memoryMiB: expected a JSON int64"},
		{"negative memory", strings.Replace(good, `"memoryMiB":40960`, `"memoryMiB":-1`, 1), "field gpus[0].memoryMiB: expected a positive number of MiB (0 only on an unhealthy GPU), got -1"},
		{"zero memory on a healthy GPU", strings.Replace(good, `"memoryMiB":40960`, `"memoryMiB":0`, 1), "field gpus[0].memoryMiB: expected a positive number of MiB (0 only on an unhealthy GPU), got 0"},
		{"duplicate uuid", strings.Replace(good, `GPU-0001`, `GPU-0000`, 1), "field gpus[1].uuid: expected a UUID not already used by gpus[0]"},
		{"zero shares", strings.Replace(good, `"maxShares":10`, `"maxShares":0`, 1), "field gpus[0].maxShares: expected an integer from 1 to 100"},
		{"asymmetric links", strings.Replace(good, `[[0,12],[12,0]]`, `[[0,12],[4,0]]`, 1), "field nvlinks[0][1]: expected the same value as nvlinks[1][0]"},
		{"matrix too small", strings.Replace(good, `[[0,12],[12,0]]`, `[[0,12]]`, 1), "field nvlinks: expected a 2×2 matrix"},
		{"bad pcie level", strings.Replace(good, `"pcie":[[0,4],[4,0]]`, `"pcie":[[0,9],[9,0]]`, 1), "field pcie[0][1]: expected a PCIe level"},
		{"trailing data", good + "{}", "expected a single JSON object"},
		{"mode mig without MIG state", strings.Replace(good, `"mode":"mps"`, `"mode":"mig"`, 1), `field gpus[1].mig: expected the GPU's MIG profiles for a healthy GPU in mode mig, got none`},
		{"mode in Volcano's spelling", strings.Replace(good, `"mode":"mps"`, `"mode":"hami-core"`, 1), `field gpus[1].mode: expected one of time-sliced, mps, mig, got "hami-core"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := DecodeInventory(tc.value)
			if err == nil {
				t.Fatalf("DecodeInventory(%q) succeeded, want error containing %q", tc.value, tc.want)
			}
			if !errors.Is(err, ErrMalformed) {
				t.Errorf("error %v does not wrap ErrMalformed", err)
			}
			if !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), InventoryKey) {
				t.Errorf("error = %q, want it to start with %q and contain %q", err, InventoryKey, tc.want)
			}
		})
	}
}

func TestAssignmentRoundTrip(t *testing.T) {
	in := sampleAssignment()
	s, err := EncodeAssignment(in)
	if err != nil {
		t.Fatal(err)
	}
	out, err := DecodeAssignment(s)
	if err != nil {
		t.Fatal(err)
	}
	in.Version = Version
	if d := cmp.Diff(in, out); d != "" {
		t.Errorf("round trip (-in +out):\n%s", d)
	}
	if c, ok := out.Container("setup", true); !ok || c.Devices[0].MemoryMiB != 1024 {
		t.Errorf("Container(setup, init) = %+v, %v", c, ok)
	}
	if _, ok := out.Container("setup", false); ok {
		t.Error("Container(setup, app) found an init container")
	}
}

func TestDecodeAssignmentErrors(t *testing.T) {
	good, _ := EncodeAssignment(sampleAssignment())
	tests := []struct{ name, value, want string }{
		{"no pod uid", strings.Replace(good, `"podUID":"3f1c-uid"`, `"podUID":""`, 1), "field podUID: expected the pod's UID"},
		{"bad phase", strings.Replace(good, `"assigned"`, `"running"`, 1), `field phase: expected "assigned" or "allocated", got "running"`},
		{"cores over 100", strings.Replace(good, `"cores":30`, `"cores":130`, 1), "field containers[2].devices[0].cores: expected a percentage from 0 to 100, got 130"},
		{"gpu twice", strings.Replace(good, `"GPU-0001"`, `"GPU-0000"`, 1), "field containers[2].devices[1].uuid: expected each GPU once per container"},
		{"no devices", strings.Replace(good, `"devices":[{"uuid":"GPU-0000","memoryMiB":1024,"cores":10}]`, `"devices":[]`, 1), "field containers[0].devices: expected at least one GPU"},
		{"zero memory", strings.Replace(good, `"memoryMiB":1024`, `"memoryMiB":0`, 1), "field containers[0].devices[0].memoryMiB: expected a positive number of MiB, got 0"},
		{"restartable app container", strings.Replace(good, `"name":"main",`, `"name":"main","restartable":true,`, 1), "field containers[2].restartable: expected true only with init: true"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := DecodeAssignment(tc.value)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("DecodeAssignment error = %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

func TestParsePodOptions(t *testing.T) {
	tests := []struct {
		name    string
		ann     map[string]string
		want    PodOptions
		wantErr string
	}{
		{name: "none", ann: map[string]string{"other.io/x": "y"}},
		{
			name: "all set",
			ann: map[string]string{
				GPUTypeIncludeKey: "A100, H100", GPUUUIDExcludeKey: "GPU-1",
				TopologyKey: "required", DevicePolicyKey: "spread", NodePolicyKey: "binpack", ComputePolicyKey: "balance",
			},
			want: PodOptions{TypeInclude: []string{"A100", "H100"}, UUIDExclude: []string{"GPU-1"}, Topology: TopologyRequired,
				DevicePolicy: PolicySpread, NodePolicy: PolicyBinpack, ComputePolicy: ComputeBalance},
		},
		{name: "bad topology", ann: map[string]string{TopologyKey: "strict"}, wantErr: TopologyKey + `: expected one of prefer, required, none, got "strict"`},
		{name: "empty list item", ann: map[string]string{GPUTypeExcludeKey: "A100,,L4"}, wantErr: "field item 1: expected a comma-separated list with no empty items"},
		{name: "deviceshare type include", ann: map[string]string{DeviceShareTypeIncludeKey: "A100,H100"}, want: PodOptions{TypeInclude: []string{"A100", "H100"}}},
		{name: "deviceshare type exclude", ann: map[string]string{DeviceShareTypeExcludeKey: "T4"}, want: PodOptions{TypeExclude: []string{"T4"}}},
		{name: "deviceshare exclude ignored beside include", ann: map[string]string{DeviceShareTypeIncludeKey: "A100", DeviceShareTypeExcludeKey: "A100"},
			want: PodOptions{TypeInclude: []string{"A100"}}},
		{name: "deviceshare include agreeing with ours", ann: map[string]string{DeviceShareTypeIncludeKey: "A100", GPUTypeIncludeKey: "A100"},
			want: PodOptions{TypeInclude: []string{"A100"}}},
		{name: "deviceshare include contradicting ours", ann: map[string]string{DeviceShareTypeIncludeKey: "H100", GPUTypeIncludeKey: "A100"},
			wantErr: DeviceShareTypeIncludeKey + `: expected the same models as ` + GPUTypeIncludeKey + ` ("A100"), or only one of the two annotations, got "H100"`},
		{name: "mig-profile makes a MIG ask", ann: map[string]string{MIGProfileKey: " 1g.10gb "}, want: PodOptions{Mode: ModeMIG, MIGProfile: "1g.10gb"}},
		{name: "mig-profile beside vgpu-mode mig", ann: map[string]string{MIGProfileKey: "3g.40gb", VolcanoModeKey: "mig"}, want: PodOptions{Mode: ModeMIG, MIGProfile: "3g.40gb"}},
		{name: "mig-profile beside another mode", ann: map[string]string{MIGProfileKey: "1g.10gb", VolcanoModeKey: "hami-core"},
			wantErr: MIGProfileKey + `: expected a pod in MIG mode (volcano.sh/vgpu-mode: mig, or no volcano.sh/vgpu-mode), got volcano.sh/vgpu-mode: hami-core`},
		{name: "mig-profile not a profile", ann: map[string]string{MIGProfileKey: "10gb"},
			wantErr: MIGProfileKey + `: expected a MIG profile name such as 1g.10gb or 1g.10gb+me`},
		{name: "typo key", ann: map[string]string{Prefix + "topolgy": "none"}, wantErr: Prefix + "topolgy: expected one of the known annotations"},

		// Volcano deviceshare's keys, one by one.
		{name: "vgpu-mode hami-core is time-sliced", ann: map[string]string{VolcanoModeKey: "hami-core"}, want: PodOptions{Mode: ModeTimeSliced}},
		{name: "vgpu-mode mig", ann: map[string]string{VolcanoModeKey: "mig"}, want: PodOptions{Mode: ModeMIG}},
		{name: "vgpu-mode mps, any case", ann: map[string]string{VolcanoModeKey: " MPS "}, want: PodOptions{Mode: ModeMPS}},
		{name: "vgpu-mode unknown", ann: map[string]string{VolcanoModeKey: "vcuda"},
			wantErr: VolcanoModeKey + `: expected one of hami-core, mps, mig (hami-core = time-sliced sharing), or no annotation for any mode, got "vcuda"`},
		{name: "vgpu-mode our own spelling is not Volcano's", ann: map[string]string{VolcanoModeKey: "time-sliced"},
			wantErr: VolcanoModeKey + `: expected one of hami-core, mps, mig`},
		{name: "vgpu-use-gpuuuid", ann: map[string]string{VolcanoUUIDIncludeKey: "GPU-a, GPU-b"}, want: PodOptions{UUIDInclude: []string{"GPU-a", "GPU-b"}}},
		{name: "vgpu-use-gpuuuid skips empty items as deviceshare does", ann: map[string]string{VolcanoUUIDIncludeKey: "GPU-a,,GPU-b,"},
			want: PodOptions{UUIDInclude: []string{"GPU-a", "GPU-b"}}},
		{name: "vgpu-use-gpuuuid naming no GPU", ann: map[string]string{VolcanoUUIDIncludeKey: " , "},
			wantErr: VolcanoUUIDIncludeKey + ": expected a comma-separated list of GPU UUIDs (remove the annotation to allow any GPU)"},
		{name: "vgpu-use-gpuuuid not a UUID", ann: map[string]string{VolcanoUUIDIncludeKey: "GPU-a,GPU b"},
			wantErr: VolcanoUUIDIncludeKey + `: field item 1: expected a GPU UUID, got "GPU b"`},
		{name: "vgpu-nouse-gpuuuid beside use: both apply", ann: map[string]string{VolcanoUUIDIncludeKey: "GPU-a,GPU-b", VolcanoUUIDExcludeKey: "GPU-b"},
			want: PodOptions{UUIDInclude: []string{"GPU-a", "GPU-b"}, UUIDExclude: []string{"GPU-b"}}},
		{name: "vgpu-use-gpuuuid contradicting ours", ann: map[string]string{VolcanoUUIDIncludeKey: "GPU-a", GPUUUIDIncludeKey: "GPU-b"},
			wantErr: VolcanoUUIDIncludeKey + `: expected the same GPUs as ` + GPUUUIDIncludeKey + ` ("GPU-b"), or only one of the two annotations, got "GPU-a"`},
		{name: "vgpu-nouse-gpuuuid agreeing with ours", ann: map[string]string{VolcanoUUIDExcludeKey: "GPU-a", GPUUUIDExcludeKey: "GPU-a"},
			want: PodOptions{UUIDExclude: []string{"GPU-a"}}},
		{name: "vgpu-podgroup-policy spread", ann: map[string]string{VolcanoPodGroupPolicyKey: "spread"}, want: PodOptions{SpreadGroup: true}},
		{name: "vgpu-podgroup-policy binpack is not Volcano's", ann: map[string]string{VolcanoPodGroupPolicyKey: "binpack"},
			wantErr: VolcanoPodGroupPolicyKey + `: expected spread (no two pods of one PodGroup on one GPU), the only value Volcano defines, got "binpack"`},
		{name: "deviceshare type in NVIDIA- form", ann: map[string]string{DeviceShareTypeIncludeKey: "NVIDIA-NVIDIA A100"},
			want: PodOptions{TypeInclude: []string{"NVIDIA-NVIDIA A100"}}},
		{name: "deviceshare's own outputs ignored (a pod migrated from it)", ann: map[string]string{
			"volcano.sh/vgpu-ids-new": "GPU-a,NVIDIA,1024,10:", "volcano.sh/vgpu-node": "n1", "volcano.sh/vgpu-time": "1700000000",
			"volcano.sh/devices-to-allocate": "GPU-a,NVIDIA,1024,10:", "volcano.sh/bind-time": "1700000000", "volcano.sh/bind-phase": "allocating"}},
		{name: "other Volcano annotations are not ours to judge", ann: map[string]string{"volcano.sh/job-name": "j", "volcano.sh/queue-name": "q",
			"scheduling.k8s.io/group-name": "pg"}},
		{name: "unknown volcano.sh/vgpu- key", ann: map[string]string{"volcano.sh/vgpu-use-gputype": "A100"},
			wantErr: `volcano.sh/vgpu-use-gputype: expected one of the Volcano vGPU annotations this scheduler honours, volcano.sh/vgpu-mode, ` +
				`volcano.sh/vgpu-use-gpuuuid, volcano.sh/vgpu-nouse-gpuuuid, volcano.sh/vgpu-podgroup-policy, nvidia.com/use-gputype, ` +
				`nvidia.com/nouse-gputype (remove it: an unknown key would do nothing), got an unknown key`},
		{name: "a resource name set as an annotation", ann: map[string]string{DefaultResourceMemory: "4096"},
			wantErr: DefaultResourceMemory + ": expected no annotation of that name: it is a resource, asked under the container's resources.limits"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParsePodOptions(tc.ann)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error = %v, want %q", err, tc.wantErr)
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

func TestResourceNamesValidate(t *testing.T) {
	if err := DefaultResourceNames().Validate(); err != nil {
		t.Fatal(err)
	}
	r := DefaultResourceNames()
	r.Cores = r.Memory
	if err := r.Validate(); err == nil || !strings.Contains(err.Error(), "expected distinct names") {
		t.Errorf("duplicate names: err = %v", err)
	}
	r = DefaultResourceNames()
	r.Number = "vgpu"
	if err := r.Validate(); err == nil || !strings.Contains(err.Error(), "domain-prefixed") {
		t.Errorf("unprefixed name: err = %v", err)
	}
}

func TestModelMatches(t *testing.T) {
	const a100 = "NVIDIA A100-SXM4-80GB"
	tests := []struct {
		name, model, filter string
		want                bool
	}{
		{"bare model substring", a100, "A100", true},
		{"NVML name", a100, "nvidia a100", true},
		{"deviceshare type (NVIDIA- + model)", a100, "NVIDIA-NVIDIA A100", true},
		{"deviceshare type, any case", a100, "nvidia-nvidia a100-sxm4", true},
		{"deviceshare type of another model", a100, "NVIDIA-NVIDIA H100", false},
		{"another model", a100, "H100", false},
		{"the prefix alone matches every GPU, as in deviceshare", "Tesla T4", "NVIDIA-", true},
		{"longer than the type", "T4", "NVIDIA-T4-16GB", false},
		{"empty filter", a100, "", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := ModelMatches(tc.model, tc.filter); got != tc.want {
				t.Errorf("ModelMatches(%q, %q) = %t, want %t", tc.model, tc.filter, got, tc.want)
			}
		})
	}
}

func TestGPUModeNames(t *testing.T) {
	tests := []struct {
		mode             GPUMode
		volcano, display string
	}{
		{ModeTimeSliced, "hami-core", "time-sliced (hami-core)"},
		{ModeMPS, "mps", "mps"},
		{ModeMIG, "mig", "mig"},
	}
	for _, tc := range tests {
		t.Run(string(tc.mode), func(t *testing.T) {
			if got := tc.mode.Volcano(); got != tc.volcano {
				t.Errorf("Volcano() = %q, want %q", got, tc.volcano)
			}
			if got := tc.mode.String(); got != tc.display {
				t.Errorf("String() = %q, want %q", got, tc.display)
			}
			back, err := ParseVolcanoMode(VolcanoModeKey, tc.volcano)
			if err != nil || back != tc.mode {
				t.Errorf("ParseVolcanoMode(%q) = %q, %v; want %q", tc.volcano, back, err, tc.mode)
			}
		})
	}
}

func TestGPUSharingMode(t *testing.T) {
	for _, tc := range []struct {
		name string
		gpu  GPU
		want GPUMode
	}{
		{name: "no mode (an older plugin) is time-sliced", gpu: GPU{}, want: ModeTimeSliced},
		{name: "mps", gpu: GPU{Mode: ModeMPS}, want: ModeMPS},
		{name: "time-sliced", gpu: GPU{Mode: ModeTimeSliced}, want: ModeTimeSliced},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.gpu.SharingMode(); got != tc.want {
				t.Errorf("SharingMode() = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestParseGPUMode(t *testing.T) {
	for _, tc := range []struct {
		name, in, wantErr string
		want              GPUMode
	}{
		{name: "time-sliced", in: "time-sliced", want: ModeTimeSliced},
		{name: "mps", in: "mps", want: ModeMPS},
		{name: "mig", in: "mig", want: ModeMIG},
		{name: "Volcano's hami-core is not the config's spelling", in: "hami-core", wantErr: `sharing.mode: expected one of time-sliced, mps, mig, got "hami-core"`},
		{name: "case matters", in: "MPS", wantErr: `got "MPS"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseGPUMode("sharing.mode", GPUMode(tc.in))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Errorf("ParseGPUMode(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
			}
		})
	}
}
