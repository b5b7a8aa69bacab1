package cluster

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	dpconfig "github.com/volcano-vgpu/volcano-vgpu/device-plugin/config"
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
		// CDI mode, with specs where the container emulator reads them: never the host's.
		if want := filepath.Join(cfg.SocketDir, "cdi"); !got.CDI.On() || got.CDI.SpecDir != want || got.CDI.HookPath != filepath.Join(cfg.BinDir, "vgpu-cdi-hook") {
			t.Errorf("cdi = %+v, want CDI mode with specDir %s and the hook in %s", got.CDI, want, cfg.BinDir)
		}
	}
}

func TestSchedulerWrapperAndEnv(t *testing.T) {
	cfg := testConfig(t)
	cfg.SchedulerConf = "/conf"
	cfg.SchedulerWrapper = []string{filepath.Join(cfg.BinDir, "wrapper"), "--flag", "--"}
	cfg.SchedulerEnv = []string{"KUBERNETES_SERVICE_HOST=127.0.0.1"}
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
		if diff := cmp.Diff(cfg.SchedulerEnv, comp.env); diff != "" {
			t.Errorf("env (-want +got):\n%s", diff)
		}
		return
	}
	t.Fatal("no vc-scheduler component")
}
