package main

import (
	"github.com/spf13/pflag"

	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/config"
)

type flags struct {
	configFile, nodeName, kubeconfig string
	simulate, simulateXIDFile        string
	pluginsDir, kubeletSocket        string
	podResourcesSocket, stateDir     string
	metricsAddress                   string
}

func (f *flags) bind(fs *pflag.FlagSet) {
	fs.StringVar(&f.configFile, "config", "", "device plugin config file (version: v1); empty uses the defaults")
	fs.StringVar(&f.nodeName, "node-name", "", "this node's name (default: $NODE_NAME)")
	fs.StringVar(&f.kubeconfig, "kubeconfig", "", "kubeconfig file; empty uses the in-cluster config")
	fs.StringVar(&f.simulate, "simulate", "", "simulate NVML from this simulated-cluster file (e2e/sim/clusters/*.yaml) (its node named --node-name)")
	fs.StringVar(&f.simulateXIDFile, "simulate-xid-file", "", "with --simulate: file whose new lines \"<gpu uuid|index|all> <xid>\" inject Xid errors (default <state dir>/inject-xid)")
	fs.StringVar(&f.pluginsDir, "device-plugins-dir", "", "kubelet's device-plugins directory (overrides kubelet.devicePluginsDir)")
	fs.StringVar(&f.kubeletSocket, "kubelet-socket", "", "kubelet's registration socket (overrides kubelet.kubeletSocket; default <device-plugins-dir>/kubelet.sock)")
	fs.StringVar(&f.podResourcesSocket, "pod-resources-socket", "", "kubelet's PodResources socket (overrides kubelet.podResourcesSocket)")
	fs.StringVar(&f.stateDir, "state-dir", "", "host directory for per-container limiter files (overrides stateDir)")
	fs.StringVar(&f.metricsAddress, "metrics-address", "", "address of /metrics, \"\" keeps the config's (overrides metricsAddress; \"off\" disables)")
}

// config loads the file (or defaults) and applies the path flags on top.
func (f *flags) config() (config.Config, error) {
	c := config.Default()
	if f.configFile != "" {
		var err error
		if c, err = config.Load(f.configFile); err != nil {
			return c, err
		}
	}
	if f.pluginsDir != "" {
		oldDefault := c.Kubelet.DevicePluginsDir + "/kubelet.sock"
		c.Kubelet.DevicePluginsDir = f.pluginsDir
		if c.Kubelet.KubeletSocket == oldDefault {
			c.Kubelet.KubeletSocket = f.pluginsDir + "/kubelet.sock"
		}
	}
	set := func(dst *string, v string) {
		if v != "" {
			*dst = v
		}
	}
	set(&c.Kubelet.KubeletSocket, f.kubeletSocket)
	set(&c.Kubelet.PodResourcesSocket, f.podResourcesSocket)
	set(&c.StateDir, f.stateDir)
	switch f.metricsAddress {
	case "":
	case "off":
		c.MetricsAddress = ""
	default:
		c.MetricsAddress = f.metricsAddress
	}
	return c, c.Validate()
}
