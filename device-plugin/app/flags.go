package app

import (
	"github.com/spf13/pflag"

	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/config"
)

// Flags are the command-line flags every device plugin binary has.
type Flags struct {
	ConfigFile, NodeName, Kubeconfig string
	PluginsDir, KubeletSocket        string
	PodResourcesSocket, StateDir     string
	MetricsAddress, CDISpecDir       string
	MIGMinors                        string
}

// Bind defines the flags on fs.
func (f *Flags) Bind(fs *pflag.FlagSet) {
	fs.StringVar(&f.ConfigFile, "config", "", "device plugin config file (version: v1); empty uses the defaults")
	fs.StringVar(&f.NodeName, "node-name", "", "this node's name (default: $NODE_NAME)")
	fs.StringVar(&f.Kubeconfig, "kubeconfig", "", "kubeconfig file; empty uses the in-cluster config")
	fs.StringVar(&f.PluginsDir, "device-plugins-dir", "", "kubelet's device-plugins directory (overrides kubelet.devicePluginsDir)")
	fs.StringVar(&f.KubeletSocket, "kubelet-socket", "", "kubelet's registration socket (overrides kubelet.kubeletSocket; default <device-plugins-dir>/kubelet.sock)")
	fs.StringVar(&f.PodResourcesSocket, "pod-resources-socket", "", "kubelet's PodResources socket (overrides kubelet.podResourcesSocket)")
	fs.StringVar(&f.StateDir, "state-dir", "", "host directory for per-container limiter files (overrides stateDir)")
	fs.StringVar(&f.CDISpecDir, "cdi-spec-dir", "", "host directory of the plugin's own CDI specs (overrides cdi.specDir)")
	fs.StringVar(&f.MIGMinors, "mig-minors", "", "the driver's MIG capability minors file (overrides cdi.migMinors)")
	fs.StringVar(&f.MetricsAddress, "metrics-address", "", "address of /metrics, \"\" keeps the config's (overrides metricsAddress; \"off\" disables)")
}

// Config loads the file (or defaults) and applies the path flags on top.
func (f *Flags) Config() (config.Config, error) {
	c := config.Default()
	if f.ConfigFile != "" {
		var err error
		if c, err = config.Load(f.ConfigFile); err != nil {
			return c, err
		}
	}
	if f.PluginsDir != "" {
		oldDefault := c.Kubelet.DevicePluginsDir + "/kubelet.sock"
		c.Kubelet.DevicePluginsDir = f.PluginsDir
		if c.Kubelet.KubeletSocket == oldDefault {
			c.Kubelet.KubeletSocket = f.PluginsDir + "/kubelet.sock"
		}
	}
	set := func(dst *string, v string) {
		if v != "" {
			*dst = v
		}
	}
	set(&c.Kubelet.KubeletSocket, f.KubeletSocket)
	set(&c.Kubelet.PodResourcesSocket, f.PodResourcesSocket)
	set(&c.StateDir, f.StateDir)
	set(&c.CDI.SpecDir, f.CDISpecDir)
	set(&c.CDI.MIGMinors, f.MIGMinors)
	switch f.MetricsAddress {
	case "":
	case "off":
		c.MetricsAddress = ""
	default:
		c.MetricsAddress = f.MetricsAddress
	}
	return c, c.Validate()
}
