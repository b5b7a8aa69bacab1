package app

import (
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/spf13/pflag"
)

func TestFlagsConfig(t *testing.T) {
	type paths struct{ PluginsDir, KubeletSocket, PodResourcesSocket, StateDir, MetricsAddress, CDISpecDir string }
	def := func() paths {
		var f Flags
		c, err := f.Config()
		if err != nil {
			t.Fatal(err)
		}
		return paths{c.Kubelet.DevicePluginsDir, c.Kubelet.KubeletSocket, c.Kubelet.PodResourcesSocket, c.StateDir, c.MetricsAddress, c.CDI.SpecDir}
	}()
	tests := []struct {
		name string
		args []string
		want func(p paths) paths
	}{
		{name: "no flags: the config's defaults", want: func(p paths) paths { return p }},
		{name: "device-plugins-dir moves the default kubelet socket with it",
			args: []string{"--device-plugins-dir=/n1/dp"},
			want: func(p paths) paths { p.PluginsDir, p.KubeletSocket = "/n1/dp", "/n1/dp/kubelet.sock"; return p }},
		{name: "an explicit kubelet socket wins",
			args: []string{"--device-plugins-dir=/n1/dp", "--kubelet-socket=/k.sock"},
			want: func(p paths) paths { p.PluginsDir, p.KubeletSocket = "/n1/dp", "/k.sock"; return p }},
		{name: "sockets, state and metrics address",
			args: []string{"--pod-resources-socket=/pr.sock", "--state-dir=/st", "--metrics-address=127.0.0.1:9"},
			want: func(p paths) paths {
				p.PodResourcesSocket, p.StateDir, p.MetricsAddress = "/pr.sock", "/st", "127.0.0.1:9"
				return p
			}},
		{name: "CDI spec directory", args: []string{"--cdi-spec-dir=/n1/cdi"},
			want: func(p paths) paths { p.CDISpecDir = "/n1/cdi"; return p }},
		{name: "metrics off", args: []string{"--metrics-address=off"},
			want: func(p paths) paths { p.MetricsAddress = ""; return p }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var f Flags
			fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
			f.Bind(fs)
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			c, err := f.Config()
			if err != nil {
				t.Fatal(err)
			}
			got := paths{c.Kubelet.DevicePluginsDir, c.Kubelet.KubeletSocket, c.Kubelet.PodResourcesSocket, c.StateDir, c.MetricsAddress, c.CDI.SpecDir}
			if diff := cmp.Diff(tc.want(def), got); diff != "" {
				t.Errorf("paths (-want +got):\n%s", diff)
			}
		})
	}
}

func TestFlagsConfigMissingFile(t *testing.T) {
	f := Flags{ConfigFile: filepath.Join(t.TempDir(), "absent.yaml")}
	if _, err := f.Config(); err == nil {
		t.Fatal("a missing --config file was accepted")
	}
}
