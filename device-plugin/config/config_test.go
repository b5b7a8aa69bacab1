package config

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/volcano-vgpu/volcano-vgpu/api"
)

func TestExampleIsTheDefault(t *testing.T) {
	c, err := Load("testdata/example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(Default(), c); d != "" {
		t.Errorf("testdata/example.yaml differs from the defaults (-default +file):\n%s", d)
	}
}

func TestParse(t *testing.T) {
	tests := []struct {
		name    string
		yaml    string
		wantErr string
		check   func(t *testing.T, c Config)
	}{
		{name: "minimal file gets defaults", yaml: "version: v1", check: func(t *testing.T, c Config) {
			if c.Kubelet.KubeletSocket != "/var/lib/kubelet/device-plugins/kubelet.sock" || c.MaxShares != 10 || len(c.Health.IgnoredXIDs) != 6 {
				t.Errorf("defaults = %+v", c)
			}
		}},
		{name: "kubelet socket follows the plugins dir", yaml: "version: v1\nkubelet:\n  devicePluginsDir: /tmp/n1/dp", check: func(t *testing.T, c Config) {
			if c.Kubelet.KubeletSocket != "/tmp/n1/dp/kubelet.sock" || c.PluginSocket() != "/tmp/n1/dp/volcano-vgpu.sock" {
				t.Errorf("sockets = %s, %s", c.Kubelet.KubeletSocket, c.PluginSocket())
			}
		}},
		{name: "empty ignore list is kept", yaml: "version: v1\nhealth:\n  ignoredXIDs: []", check: func(t *testing.T, c Config) {
			if len(c.Health.IgnoredXIDs) != 0 {
				t.Errorf("ignoredXIDs = %v", c.Health.IgnoredXIDs)
			}
		}},
		{name: "context size by model, longest match", yaml: "version: v1\nlimiter:\n  contextMiB:\n    default: 300\n    H100: 520\n    H100 NVL: 560", check: func(t *testing.T, c Config) {
			got := map[string]uint32{}
			for _, m := range []string{"NVIDIA H100 80GB HBM3", "NVIDIA H100 NVL", "NVIDIA A100-SXM4-40GB"} {
				got[m] = c.Limiter.ContextMiBFor(m)
			}
			want := map[string]uint32{"NVIDIA H100 80GB HBM3": 520, "NVIDIA H100 NVL": 560, "NVIDIA A100-SXM4-40GB": 300}
			if d := cmp.Diff(want, got); d != "" {
				t.Errorf("context MiB by model (-want +got):\n%s", d)
			}
		}},
		{name: "context size not counted by default", yaml: "version: v1", check: func(t *testing.T, c Config) {
			if v := c.Limiter.ContextMiBFor("NVIDIA H100 80GB HBM3"); v != 0 {
				t.Errorf("default context MiB = %d, want 0", v)
			}
		}},
		{name: "launch slots confine by default", yaml: "version: v1", check: func(t *testing.T, c Config) {
			if !c.SlotsConfine() {
				t.Errorf("limiter.confineSlots = %v, want true by default", c.Limiter.ConfineSlots)
			}
		}},
		{name: "launch slots that only pace credit", yaml: "version: v1\nlimiter:\n  confineSlots: false", check: func(t *testing.T, c Config) {
			if c.SlotsConfine() {
				t.Errorf("limiter.confineSlots: false read as %v", *c.Limiter.ConfineSlots)
			}
		}},
		// measured on an H200 (the gpu bundle, 2026-11-27): filled in unless named
		{name: "context size measured for the H200", yaml: "version: v1", check: func(t *testing.T, c Config) {
			if v := c.Limiter.ContextMiBFor("NVIDIA H200"); v != 612 {
				t.Errorf("H200 context MiB = %d, want 612", v)
			}
		}},
		{name: "measured context size beside a configured default", yaml: "version: v1\nlimiter:\n  contextMiB:\n    default: 300", check: func(t *testing.T, c Config) {
			if h200, a100 := c.Limiter.ContextMiBFor("NVIDIA H200"), c.Limiter.ContextMiBFor("NVIDIA A100-SXM4-40GB"); h200 != 612 || a100 != 300 {
				t.Errorf("context MiB H200 %d, A100 %d; want 612 and 300", h200, a100)
			}
		}},
		{name: "configured H200 context size wins", yaml: "version: v1\nlimiter:\n  contextMiB:\n    H200: 0", check: func(t *testing.T, c Config) {
			if v := c.Limiter.ContextMiBFor("NVIDIA H200"); v != 0 {
				t.Errorf("H200 context MiB = %d, want the configured 0", v)
			}
		}},
		{name: "context size too large", yaml: "version: v1\nlimiter:\n  contextMiB:\n    H100: 100000", wantErr: "limiter.contextMiB: expected a GPU model substring"},
		{name: "context size negative", yaml: "version: v1\nlimiter:\n  contextMiB:\n    H100: -1", wantErr: "limiter.contextMiB"},
		{name: "every GPU time-sliced by default", yaml: "version: v1", check: func(t *testing.T, c Config) {
			if m := c.Sharing.ModeFor("n1", "NVIDIA H100 80GB HBM3", "GPU-a"); m != api.ModeTimeSliced || c.Sharing.Uses(api.ModeMPS) {
				t.Errorf("mode = %q, uses mps %v: want time-sliced only", m, c.Sharing.Uses(api.ModeMPS))
			}
			if !c.MPS.ComputeModeEnabled() || c.MPS.UID() != 0 || c.MPS.ControlCommand != "nvidia-cuda-mps-control" {
				t.Errorf("mps = %+v", c.MPS)
			}
		}},
		{name: "sharing: UUID over model over node over default", yaml: "version: v1\nsharing:\n  mode: mps\n  nodes:\n    n2: time-sliced\n  models:\n    H100: mps\n    A100: time-sliced\n    A100-SXM4-80GB: mps\n  gpus:\n    GPU-b: time-sliced", check: func(t *testing.T, c Config) {
			got := map[string]api.GPUMode{}
			for _, g := range []struct{ node, model, uuid string }{
				{"n1", "NVIDIA H100 80GB HBM3", "GPU-a"}, // models: H100
				{"n1", "NVIDIA H100 80GB HBM3", "GPU-b"}, // gpus beats models
				{"n1", "NVIDIA A100-SXM4-40GB", "GPU-c"}, // models: A100
				{"n1", "NVIDIA A100-SXM4-80GB", "GPU-d"}, // the longer model key wins
				{"n2", "NVIDIA L4", "GPU-e"},             // nodes: n2
				{"n1", "NVIDIA L4", "GPU-f"},             // sharing.mode
			} {
				got[g.uuid] = c.Sharing.ModeFor(g.node, g.model, g.uuid)
			}
			want := map[string]api.GPUMode{"GPU-a": api.ModeMPS, "GPU-b": api.ModeTimeSliced, "GPU-c": api.ModeTimeSliced, "GPU-d": api.ModeMPS, "GPU-e": api.ModeTimeSliced, "GPU-f": api.ModeMPS}
			if d := cmp.Diff(want, got); d != "" {
				t.Errorf("modes (-want +got):\n%s", d)
			}
		}},
		{name: "sharing: MIG by model, on-demand", yaml: "version: v1\nsharing:\n  models:\n    A100: mig", check: func(t *testing.T, c Config) {
			if m := c.Sharing.ModeFor("n1", "NVIDIA A100-SXM4-40GB", "GPU-a"); m != api.ModeMIG || c.MIG.GeometryFor("NVIDIA A100-SXM4-40GB", "GPU-a") != nil {
				t.Errorf("mode %q, geometry %v: want mig, on-demand", m, c.MIG.GeometryFor("NVIDIA A100-SXM4-40GB", "GPU-a"))
			}
		}},
		{name: "sharing: Volcano's spelling is not a mode here", yaml: "version: v1\nsharing:\n  mode: hami-core", wantErr: `sharing.mode: expected one of time-sliced, mps, mig, got "hami-core"`},
		{name: "mig: fixed geometry by UUID over model", yaml: "version: v1\nsharing:\n  mode: mig\nmig:\n  models:\n    A100: [3g.20gb, 3g.20gb]\n    A100-SXM4-80GB: [7g.80gb]\n  gpus:\n    GPU-b: [1g.5gb, 1g.5gb+me]", check: func(t *testing.T, c Config) {
			got := map[string]Geometry{}
			for _, g := range []struct{ model, uuid string }{
				{"NVIDIA A100-SXM4-40GB", "GPU-a"}, // models: A100
				{"NVIDIA A100-SXM4-40GB", "GPU-b"}, // gpus beats models
				{"NVIDIA A100-SXM4-80GB", "GPU-c"}, // the longer model key wins
				{"NVIDIA H100 80GB HBM3", "GPU-d"}, // no rule: on-demand
			} {
				got[g.uuid] = c.MIG.GeometryFor(g.model, g.uuid)
			}
			want := map[string]Geometry{"GPU-a": {"3g.20gb", "3g.20gb"}, "GPU-b": {"1g.5gb", "1g.5gb+me"}, "GPU-c": {"7g.80gb"}, "GPU-d": nil}
			if d := cmp.Diff(want, got); d != "" {
				t.Errorf("geometries (-want +got):\n%s", d)
			}
		}},
		{name: "mig: geometry with no GPU in mode mig", yaml: "version: v1\nmig:\n  models:\n    A100: [7g.40gb]", wantErr: "mig: expected a geometry only where sharing gives a GPU mode mig"},
		{name: "mig: not a profile name", yaml: "version: v1\nsharing:\n  mode: mig\nmig:\n  models:\n    A100: [3g.20gb, 3g]", wantErr: `mig.models["A100"][1]: expected a MIG profile name such as 1g.10gb`},
		{name: "mig: more than a GPU's compute slices", yaml: "version: v1\nsharing:\n  mode: mig\nmig:\n  gpus:\n    GPU-a: [4g.20gb, 4g.20gb]", wantErr: `mig.gpus["GPU-a"]: expected instances of at most 7 compute slices together, got 8 (4g.20gb, 4g.20gb)`},
		{name: "mig: empty geometry", yaml: "version: v1\nsharing:\n  mode: mig\nmig:\n  models:\n    A100: []", wantErr: `mig.models["A100"]: expected a list of MIG profiles`},
		{name: "mig: bad UUID key", yaml: "version: v1\nsharing:\n  mode: mig\nmig:\n  gpus:\n    \"GPU a\": [7g.40gb]", wantErr: `mig.gpus: expected a GPU UUID such as GPU-5a7c… as the key, got "GPU a"`},
		{name: "sharing: a bad UUID key", yaml: "version: v1\nsharing:\n  gpus:\n    \"GPU a\": mps", wantErr: `sharing.gpus: expected a GPU UUID such as GPU-5a7c… as the key, got "GPU a"`},
		{name: "sharing: an empty model key", yaml: "version: v1\nsharing:\n  models:\n    \" \": mps", wantErr: `sharing.models: expected a non-empty substring of a GPU model name`},
		{name: "sharing: unknown rule kind", yaml: "version: v1\nsharing:\n  uuids:\n    GPU-a: mps", wantErr: `unknown field "sharing.uuids"`},
		{name: "mps: compute mode left alone, other user", yaml: "version: v1\nmps:\n  setComputeMode: false\n  clientUID: 1000", check: func(t *testing.T, c Config) {
			if c.MPS.ComputeModeEnabled() || c.MPS.UID() != 1000 {
				t.Errorf("mps = %+v", c.MPS)
			}
		}},
		{name: "mps: relative control command", yaml: "version: v1\nmps:\n  controlCommand: bin/mps-control", wantErr: `mps.controlCommand: expected a command name found in PATH or an absolute path, got "bin/mps-control"`},
		{name: "mps: probe too often", yaml: "version: v1\nmps:\n  probeInterval: 10ms", wantErr: "mps.probeInterval: expected 1s to 10m, got 10ms"},
		{name: "mps: negative user", yaml: "version: v1\nmps:\n  clientUID: -1", wantErr: "mps.clientUID: expected a user ID"},
		{name: "unknown top-level key", yaml: "version: v1\nmaxshares: 3", wantErr: `unknown field "maxshares"`},
		{name: "unknown nested key", yaml: "version: v1\nhealth:\n  ignoreXIDs: [1]", wantErr: `unknown field "health.ignoreXIDs"`},
		{name: "wrong type", yaml: "version: v1\nmaxShares: many", wantErr: "maxShares"},
		{name: "no version", yaml: "maxShares: 4", wantErr: `version: expected "v1", got ""`},
		{name: "future version", yaml: "version: v2", wantErr: `version: expected "v1", got "v2"`},
		{name: "relative path", yaml: "version: v1\nstateDir: state", wantErr: `stateDir: expected an absolute path, got "state"`},
		{name: "socket name with a slash", yaml: "version: v1\nkubelet:\n  socketName: a/b.sock", wantErr: "kubelet.socketName: expected a plain file name"},
		{name: "socket path too long", yaml: "version: v1\nkubelet:\n  devicePluginsDir: /" + strings.Repeat("d", 100), wantErr: "Linux allows at most 107: use a shorter directory"},
		{name: "bad policy", yaml: "version: v1\ndefaultComputePolicy: strict", wantErr: "defaultComputePolicy: expected one of fixed, balance, none"},
		{name: "too many shares", yaml: "version: v1\nmaxShares: 101", wantErr: "maxShares: expected 1 to 100"},
		{name: "bad duration", yaml: "version: v1\nreport:\n  heartbeatPeriod: soon", wantErr: `report.heartbeatPeriod: expected a duration such as 30s or 5m, got "soon"`},
		{name: "CDI mode by default, GPUs by UUID", yaml: "version: v1", check: func(t *testing.T, c Config) {
			if !c.CDI.On() || !c.CDI.KeepsPreload() || c.CDI.Kind != "nvidia.com/gpu" || c.CDI.Strategy() != "uuid" || c.CDI.Annotations {
				t.Errorf("cdi = %+v", c.CDI)
			}
		}},
		{name: "env mode keeps no preload hook", yaml: "version: v1\ncdi:\n  enabled: false", check: func(t *testing.T, c Config) {
			if c.CDI.On() || c.CDI.KeepsPreload() {
				t.Errorf("cdi = %+v: want env mode without the hook", c.CDI)
			}
		}},
		{name: "CDI by index", yaml: "version: v1\ncdi:\n  deviceNames: index", check: func(t *testing.T, c Config) {
			if c.CDI.Strategy() != "index" {
				t.Errorf("strategy = %s", c.CDI.Strategy())
			}
		}},
		{name: "CDI kind without class", yaml: "version: v1\ncdi:\n  kind: nvidia.com", wantErr: `cdi.kind: invalid CDI name: kind "nvidia.com": expected vendor/class such as nvidia.com/gpu`},
		{name: "CDI class with a dot", yaml: "version: v1\ncdi:\n  kind: nvidia.com/gpu.x", wantErr: `cdi.kind: invalid CDI name: class "gpu.x"`},
		{name: "CDI kind of the limiter", yaml: "version: v1\ncdi:\n  kind: volcano-vgpu.io/limiter", wantErr: "cdi.kind: volcano-vgpu.io/limiter is the plugin's own kind"},
		{name: "CDI unknown strategy", yaml: "version: v1\ncdi:\n  deviceNames: busid", wantErr: `cdi.deviceNames: expected one of index, uuid, got "busid"`},
		{name: "CDI relative spec dir", yaml: "version: v1\ncdi:\n  specDir: cdi", wantErr: `cdi.specDir: expected an absolute path on the host, got "cdi"`},
		{name: "CDI relative toolkit spec dir", yaml: "version: v1\ncdi:\n  toolkitSpecDirs: [/etc/cdi, run/cdi]", wantErr: `cdi.toolkitSpecDirs[1]: expected an absolute path on the host, got "run/cdi"`},
		{name: "CDI unknown key", yaml: "version: v1\ncdi:\n  enable: true", wantErr: `unknown field "cdi.enable"`},
		{name: "memory guard on by default", yaml: "version: v1", check: func(t *testing.T, c Config) {
			want := MemoryGuard{Period: Duration{Duration: 2 * time.Second}, ToleranceMiB: 64, UncountedContextMiB: 1024, UnlimitedProcesses: UnlimitedReport}
			if d := cmp.Diff(want, c.MemoryGuard); d != "" {
				t.Errorf("memoryGuard (-want +got):\n%s", d)
			}
		}},
		{name: "memory guard off", yaml: "version: v1\nmemoryGuard:\n  disabled: true", check: func(t *testing.T, c Config) {
			if !c.MemoryGuard.Disabled {
				t.Errorf("memoryGuard = %+v, want disabled", c.MemoryGuard)
			}
		}},
		{name: "memory guard period too short", yaml: "version: v1\nmemoryGuard:\n  period: 10ms", wantErr: "memoryGuard.period: expected 100ms to 10m, got 10ms"},
		{name: "memory guard period not a duration", yaml: "version: v1\nmemoryGuard:\n  period: often", wantErr: `memoryGuard.period: expected a duration such as 30s or 5m, got "often"`},
		{name: "memory guard negative tolerance", yaml: "version: v1\nmemoryGuard:\n  toleranceMiB: -1", wantErr: "memoryGuard.toleranceMiB: expected 1 to 65536 MiB"},
		{name: "unlimited processes killed", yaml: "version: v1\nmemoryGuard:\n  unlimitedProcesses: kill", check: func(t *testing.T, c Config) {
			if c.MemoryGuard.UnlimitedProcesses != UnlimitedKill {
				t.Errorf("memoryGuard.unlimitedProcesses = %q, want kill", c.MemoryGuard.UnlimitedProcesses)
			}
		}},
		{name: "unlimited processes: unknown action", yaml: "version: v1\nmemoryGuard:\n  unlimitedProcesses: Kill", wantErr: `memoryGuard.unlimitedProcesses: expected report, kill or ignore, got "Kill"`},
		{name: "memory guard context allowance too large", yaml: "version: v1\nmemoryGuard:\n  uncountedContextMiB: 20000", wantErr: "memoryGuard.uncountedContextMiB: expected 1 to 16384 MiB"},
		{name: "duplicate key", yaml: "version: v1\nmaxShares: 3\nmaxShares: 4", wantErr: "maxShares"},
		{name: "duplicate resource names", yaml: "version: v1\nresourceNames:\n  number: a.io/x\n  memory: a.io/x\n  memoryPercentage: a.io/y\n  cores: a.io/z", wantErr: "resourceNames: resource names"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Parse([]byte(tc.yaml))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want it to contain %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, c)
		})
	}
}
