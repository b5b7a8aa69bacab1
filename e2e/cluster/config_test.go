package cluster

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/volcano-vgpu/volcano-vgpu/api"
	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/cdi"
	dpconfig "github.com/volcano-vgpu/volcano-vgpu/device-plugin/config"
	"github.com/volcano-vgpu/volcano-vgpu/e2e/containeremu"
)

func TestDefaultConfigSchedulerConfAndHAMi(t *testing.T) {
	cfg, err := DefaultConfig("/repo")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.SchedulerConf != "/repo/config/scheduler/volcano-scheduler.conf" || cfg.DevicePluginHAMi {
		t.Errorf("defaults: conf %s, hami %t", cfg.SchedulerConf, cfg.DevicePluginHAMi)
	}
	t.Setenv(EnvSchedulerConf, "config/scheduler/deviceshare.conf")
	t.Setenv(EnvDevicePluginHAMi, "true")
	if cfg, err = DefaultConfig("/repo"); err != nil {
		t.Fatal(err)
	}
	if cfg.SchedulerConf != "/repo/config/scheduler/deviceshare.conf" || !cfg.DevicePluginHAMi {
		t.Errorf("from env: conf %s, hami %t", cfg.SchedulerConf, cfg.DevicePluginHAMi)
	}
	t.Setenv(EnvDevicePluginHAMi, "yes please")
	if _, err := DefaultConfig("/repo"); err == nil || !strings.Contains(err.Error(), EnvDevicePluginHAMi) {
		t.Errorf("bad bool: err = %v", err)
	}
}

func TestDevicePluginConfigHAMi(t *testing.T) {
	for _, hami := range []bool{false, true} {
		cfg := testConfig(t)
		cfg.DevicePluginHAMi = hami
		cfg.Root = t.TempDir() // hostLibrary must be absolute
		cfg.SocketDir = filepath.Join(cfg.Root, "nodes")
		if err := os.MkdirAll(cfg.StateDir, 0o755); err != nil {
			t.Fatal(err)
		}
		path, err := cfg.devicePluginConfig()
		if err != nil {
			t.Fatal(err)
		}
		// The file must stay valid for the device plugin's strict parser.
		got, err := dpconfig.Load(path)
		if err != nil {
			t.Fatal(err)
		}
		if got.Report.HAMi != hami {
			t.Errorf("report.hami = %t, want %t", got.Report.HAMi, hami)
		}
		// CDI mode; each node's plugin is given its own spec directory, the
		// file's is under the cluster's directory: never the host's.
		if !got.CDI.On() || !strings.HasPrefix(got.CDI.SpecDir, cfg.SocketDir+"/") || got.CDI.HookPath != filepath.Join(cfg.BinDir, "vgpu-cdi-hook") {
			t.Errorf("cdi = %+v, want CDI mode with specDir under %s and the hook in %s", got.CDI, cfg.SocketDir, cfg.BinDir)
		}
	}
}

// A node's own device plugin configuration: the shared file plus its
// settings, valid for the plugin's strict parser; other nodes keep the
// shared file.
func TestNodeDevicePluginConfig(t *testing.T) {
	const uuid = "GPU-00000000-0000-0000-0000-000000000001"
	for _, tc := range []struct {
		name, node string
		group      int
		wantOwn    bool
		wantMode   api.GPUMode
		wantErr    string
	}{
		{name: "the node with its own settings", node: "l4-0", wantOwn: true, wantMode: api.ModeMPS},
		{name: "another node reads the shared file", node: "l4-1", wantMode: api.ModeTimeSliced},
		{name: "grouped plugins cannot take one node's settings", node: "l4-0", group: 4, wantErr: "one device plugin process per node"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(t)
			cfg.Root = t.TempDir()
			cfg.SocketDir = filepath.Join(cfg.Root, "nodes")
			cfg.DevicePluginGroup = tc.group
			cfg.DevicePluginNodeConfig = map[string]string{"l4-0": "sharing:\n  gpus:\n    " + uuid + ": mps\n"}
			if err := os.MkdirAll(cfg.StateDir, 0o755); err != nil {
				t.Fatal(err)
			}
			shared, err := cfg.devicePluginConfig()
			if err != nil {
				t.Fatal(err)
			}
			path, err := cfg.nodeDevicePluginConfig(tc.node, shared)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if own := path != shared; own != tc.wantOwn {
				t.Errorf("own file %t (%s), want %t", own, path, tc.wantOwn)
			}
			got, err := dpconfig.Load(path)
			if err != nil {
				t.Fatal(err)
			}
			if m := got.Sharing.ModeFor(tc.node, "NVIDIA L4", uuid); m != tc.wantMode {
				t.Errorf("mode of %s = %s, want %s", uuid, m, tc.wantMode)
			}
			if want := filepath.Join(cfg.BinDir, "fake-mps-control"); got.MPS.ControlCommand != want {
				t.Errorf("mps.controlCommand = %q, want the fake %s", got.MPS.ControlCommand, want)
			}
		})
	}
}

func TestSchedulerWrapperAndEnv(t *testing.T) {
	cfg := testConfig(t)
	cfg.SchedulerConf = "/conf"
	cfg.SchedulerWrapper = []string{filepath.Join(cfg.BinDir, "wrapper"), "--flag", "--"}
	cfg.SchedulerEnv = []string{"KUBERNETES_SERVICE_HOST=127.0.0.1"}
	cfg.SchedulerArgs = []string{"--percentage-nodes-to-find=10"}
	for _, comp := range cfg.controlPlane(credentials{}, webhookTLS{}) {
		if comp.name != SchedulerName {
			continue
		}
		want := []string{filepath.Join(cfg.BinDir, "wrapper"), "--flag", "--", filepath.Join(cfg.BinDir, "vc-scheduler")}
		if diff := cmp.Diff(want, comp.args[:4]); diff != "" {
			t.Errorf("args (-want +got):\n%s", diff)
		}
		if !strings.Contains(strings.Join(comp.args, " "), "--scheduler-conf=/conf") {
			t.Errorf("args %v lack the scheduler conf", comp.args)
		}
		if got := comp.args[len(comp.args)-1]; got != "--percentage-nodes-to-find=10" {
			t.Errorf("last arg %q, want the extra scheduler flag", got)
		}
		if diff := cmp.Diff(cfg.SchedulerEnv, comp.env); diff != "" {
			t.Errorf("env (-want +got):\n%s", diff)
		}
		return
	}
	t.Fatal("no vc-scheduler component")
}

func TestPluginHosts(t *testing.T) {
	nodes := []string{"a-0", "a-1", "b-0", "b-1", "c-0"}
	tests := []struct {
		name      string
		group     int
		openFiles uint64
		want      []PluginHost
	}{
		{name: "default: one process per node", want: []PluginHost{
			{Name: "device-plugin-a-0", Nodes: []string{"a-0"}, First: 0},
			{Name: "device-plugin-a-1", Nodes: []string{"a-1"}, First: 1},
			{Name: "device-plugin-b-0", Nodes: []string{"b-0"}, First: 2},
			{Name: "device-plugin-b-1", Nodes: []string{"b-1"}, First: 3},
			{Name: "device-plugin-c-0", Nodes: []string{"c-0"}, First: 4},
		}},
		{name: "groups of 2: the last one short", group: 2, want: []PluginHost{ // 5 nodes → 2 + 2 + 1
			{Name: "device-plugin-group-0", Nodes: []string{"a-0", "a-1"}, First: 0},
			{Name: "device-plugin-group-1", Nodes: []string{"b-0", "b-1"}, First: 2},
			{Name: "device-plugin-group-2", Nodes: []string{"c-0"}, First: 4},
		}},
		{name: "one group for all", group: 1000, want: []PluginHost{
			{Name: "device-plugin-group-0", Nodes: nodes, First: 0},
		}},
		{name: "one group asked, but the open-file limit holds 2 nodes per process", group: 1000, openFiles: reservedFiles + 2*pluginFilesPerNode + 5, want: []PluginHost{
			{Name: "device-plugin-group-0", Nodes: []string{"a-0", "a-1"}, First: 0},
			{Name: "device-plugin-group-1", Nodes: []string{"b-0", "b-1"}, First: 2},
			{Name: "device-plugin-group-2", Nodes: []string{"c-0"}, First: 4},
		}},
		{name: "a limit below the reserve still serves one node per process", group: 3, openFiles: 100, want: []PluginHost{
			{Name: "device-plugin-group-0", Nodes: []string{"a-0"}, First: 0},
			{Name: "device-plugin-group-1", Nodes: []string{"a-1"}, First: 1},
			{Name: "device-plugin-group-2", Nodes: []string{"b-0"}, First: 2},
			{Name: "device-plugin-group-3", Nodes: []string{"b-1"}, First: 3},
			{Name: "device-plugin-group-4", Nodes: []string{"c-0"}, First: 4},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := Config{DevicePluginGroup: tc.group, OpenFiles: tc.openFiles}
			if diff := cmp.Diff(tc.want, cfg.PluginHosts(nodes)); diff != "" {
				t.Errorf("hosts (-want +got):\n%s", diff)
			}
		})
	}
}

func TestEmulatorHosts(t *testing.T) {
	nodes := []string{"a-0", "a-1", "b-0", "b-1", "c-0"}
	tests := []struct {
		name      string
		openFiles uint64
		want      []PluginHost
	}{
		{name: "this process's limit (thousands): one emulator", want: []PluginHost{{Name: EmulatorName, Nodes: nodes}}},
		{name: "room for 2 nodes per process: three, the first keeps its name", openFiles: reservedFiles + 2*emulatorFilesPerNode, want: []PluginHost{
			{Name: "kubelet-emulator", Nodes: []string{"a-0", "a-1"}, First: 0},
			{Name: "kubelet-emulator-1", Nodes: []string{"b-0", "b-1"}, First: 2},
			{Name: "kubelet-emulator-2", Nodes: []string{"c-0"}, First: 4},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := Config{OpenFiles: tc.openFiles}
			if diff := cmp.Diff(tc.want, cfg.EmulatorHosts(nodes)); diff != "" {
				t.Errorf("hosts (-want +got):\n%s", diff)
			}
		})
	}
}

func TestPluginProcArgs(t *testing.T) {
	cfg := testConfig(t)
	cfg.DevicePluginGroup = 2
	h := cfg.PluginHosts([]string{"a-0", "a-1", "b-0"})[1]
	p := cfg.pluginProc(h, "--kubeconfig=k", "dp.yaml", containeremu.DefaultConfig(cfg.Root, cfg.SocketDir))
	args := strings.Join(p.args, " ")
	for _, want := range []string{"vgpu-device-plugin-sim-group", "--nodes=b-0", "--base-dir=" + cfg.SocketDir,
		"--metrics-port=" + strconv.Itoa(cfg.Ports.DevicePluginMetricsOffset+2)} {
		if !strings.Contains(args, want) {
			t.Errorf("args %q lack %q", args, want)
		}
	}
	cfg.NoDevicePluginMetrics = true
	cfg.DevicePluginGroup = 0
	p = cfg.pluginProc(cfg.PluginHosts([]string{"a-0"})[0], "--kubeconfig=k", "dp.yaml", containeremu.DefaultConfig(cfg.Root, cfg.SocketDir))
	// The node's own CDI directory, where the container emulator reads its
	// specs and where the group binary puts them (<base-dir>/<node>/cdi).
	cdiDir := "--cdi-spec-dir=" + filepath.Join(cfg.NodeDir("a-0"), "cdi")
	if emu := containeremu.DefaultConfig(cfg.Root, cfg.SocketDir); emu.NodeCDISpecDir("a-0") != filepath.Join(cfg.NodeDir("a-0"), "cdi") {
		t.Errorf("the container emulator reads node a-0's CDI specs in %s, want %s", emu.NodeCDISpecDir("a-0"), filepath.Join(cfg.NodeDir("a-0"), "cdi"))
	}
	if args := strings.Join(p.args, " "); !strings.Contains(args, "--node-name=a-0") || !strings.Contains(args, "--metrics-address=off") || !strings.Contains(args, cdiDir) {
		t.Errorf("single-node args %q: want --node-name=a-0, --metrics-address=off and %s", args, cdiDir)
	}
}

func TestDefaultConfigDevicePluginGroup(t *testing.T) {
	t.Setenv(EnvDevicePluginGroup, "250")
	cfg, err := DefaultConfig("/repo")
	if err != nil || cfg.DevicePluginGroup != 250 {
		t.Fatalf("group = %d, err %v; want 250", cfg.DevicePluginGroup, err)
	}
	t.Setenv(EnvDevicePluginGroup, "-1")
	if _, err := DefaultConfig("/repo"); err == nil || !strings.Contains(err.Error(), EnvDevicePluginGroup) {
		t.Errorf("negative group: err = %v", err)
	}
}

func TestDevicePluginNodeMIG(t *testing.T) {
	cfg := testConfig(t)
	cfg.Root = t.TempDir()
	cfg.SocketDir = filepath.Join(cfg.Root, "nodes")
	cfg.DevicePluginNodeMIG = map[string][]int{"a100-40g-0": {1, 0}}
	emu := containeremu.DefaultConfig(cfg.Root, cfg.SocketDir)
	for _, tc := range []struct {
		node, want string
	}{
		{"a100-40g-0", "--mig-gpus=1,0"},
		{"a100-40g-1", ""},
	} {
		p := cfg.pluginProc(PluginHost{Name: DevicePluginName(tc.node), Nodes: []string{tc.node}}, "--kubeconfig=k", "conf", emu)
		var got string
		for _, a := range p.args {
			if strings.HasPrefix(a, "--mig-gpus=") {
				got = a
			}
		}
		if got != tc.want {
			t.Errorf("%s: MIG flag %q, want %q", tc.node, got, tc.want)
		}
		// every node's plugin reads its node's simulated mig-minors
		if want := "--mig-minors=" + filepath.Join(cfg.NodeDir(tc.node), "mig-minors"); !slices.Contains(p.args, want) {
			t.Errorf("%s: args %q lack %s", tc.node, p.args, want)
		}
	}
	if err := cfg.writeMIGMinors("a100-40g-0"); err != nil {
		t.Fatal(err)
	}
	if m, err := cdi.ReadMIGMinors(cfg.MIGMinorsFile("a100-40g-0")); err != nil || m["gpu0/gi1/access"] != 12 {
		t.Errorf("node's mig-minors: gpu0/gi1/access %d, %v; want 12 as the driver numbers it", m["gpu0/gi1/access"], err)
	}
	cfg.DevicePluginGroup = 4
	if _, err := cfg.nodeDevicePluginConfig("a100-40g-0", "shared"); err == nil || !strings.Contains(err.Error(), "DevicePluginNodeMIG for node a100-40g-0: needs one device plugin process per node") {
		t.Errorf("grouped plugins with a node's MIG GPUs: err = %v", err)
	}
}
