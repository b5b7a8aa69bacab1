package cluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"github.com/volcano-vgpu/volcano-vgpu/api"
	"github.com/volcano-vgpu/volcano-vgpu/e2e/containeremu"
)

// The node agents: one kubelet emulator for every simulated node (kwok runs
// no kubelet) and one device plugin per node, vgpu-device-plugin-sim (the
// shipped plugin's code on a simulated NVML, e2e/cmd/vgpu-device-plugin-sim),
// each with its own device-plugins directory, PodResources socket and state
// under SocketDir/<node>. See e2e/kubeletemu for what the emulator does.

// EmulatorName is the pid/log name of the kubelet emulator.
const EmulatorName = "kubelet-emulator"

// DevicePluginName is the pid/log name of a node's device plugin.
func DevicePluginName(node string) string { return "device-plugin-" + node }

// NodeDir is where a node's sockets, records and limiter state live.
func (c Config) NodeDir(node string) string { return filepath.Join(c.SocketDir, node) }

// RecordsDir is where the kubelet emulator records a node's Allocate answers.
func (c Config) RecordsDir(node string) string { return filepath.Join(c.NodeDir(node), "records") }

// devicePluginConfig writes the device plugin configuration the simulated
// nodes share: the limiter library is the one built in vcuda/_build; CDI mode
// (the default) with the plugin's specs where the container emulator reads
// them and the hook built in the bin directory; with DevicePluginHAMi the
// plugins also publish deviceshare's annotations.
func (c Config) devicePluginConfig() (string, error) {
	path := filepath.Join(c.StateDir, "device-plugin.yaml")
	lib := filepath.Join(c.Root, "vcuda", "_build", "libvcuda.so")
	// A short quiet period and probe interval let the GPU-fault scenarios
	// see a recovery in seconds; pods whose Allocate failed are handed back.
	specDir := containeremu.DefaultConfig(c.Root, c.SocketDir).CDISpecDir
	body := fmt.Sprintf("version: v1\nlimiter:\n  hostLibrary: %s\ncdi:\n  specDir: %s\n  hookPath: %s\n"+
		"health:\n  recoveryPeriod: 10s\n  probeInterval: 2s\nallocate:\n  reschedule: true\nreport:\n  heartbeatPeriod: 1m\n",
		lib, specDir, c.bin("vgpu-cdi-hook"))
	if c.DevicePluginHAMi {
		body += "  hami: true\n"
	}
	return path, os.WriteFile(path, []byte(body), 0o644)
}

// ensureNodeAgents starts the emulator and the device plugins that are not
// running and waits until every node advertises its GPUs.
func (cl *Cluster) ensureNodeAgents(ctx context.Context) error {
	c := cl.Config
	logger := klog.FromContext(ctx)
	dpConf, err := c.devicePluginConfig()
	if err != nil {
		return err
	}
	kubeconfig := "--kubeconfig=" + c.Kubeconfig()
	emu := containeremu.DefaultConfig(c.Root, c.SocketDir)
	procs := []proc{{name: EmulatorName, args: []string{c.bin("kubelet-emulator"), kubeconfig,
		"--base-dir=" + c.SocketDir, "--nodes-from=" + c.SimFile}}}
	for i, n := range cl.Nodes {
		dir := c.NodeDir(n.Name)
		procs = append(procs, proc{name: DevicePluginName(n.Name), args: []string{c.bin("vgpu-device-plugin-sim"), kubeconfig,
			"--config=" + dpConf, "--node-name=" + n.Name, "--sim-file=" + c.SimFile,
			"--device-plugins-dir=" + filepath.Join(dir, "device-plugins"),
			"--pod-resources-socket=" + filepath.Join(dir, "pod-resources", "kubelet.sock"),
			"--state-dir=" + filepath.Join(dir, "state"),
			// the compute controller on the fake driver, over the GPU state files the
			// container emulator gives this node's containers
			"--fake-nvml=" + filepath.Join(emu.DriverDir, "libnvidia-ml.so.1"),
			"--fake-gpu-dir=" + emu.NodeGPUDir(n.Name),
			fmt.Sprintf("--metrics-address=127.0.0.1:%d", c.Ports.DevicePluginMetricsOffset+i)}})
	}
	for _, p := range procs {
		if pid, alive := c.running(p.name); alive && c.outdated(p.name, p.args[0]) {
			logger.Info("Restarting with the newer binary", "component", p.name, "pid", pid)
			if err := c.stop(p.name, 10*time.Second); err != nil {
				return err
			}
		}
		if pid, alive := c.running(p.name); alive {
			logger.V(2).Info("Reusing running component", "component", p.name, "pid", pid)
			continue
		} else if pid != 0 {
			logger.Info("Removing stale pid file left by a crashed run", "component", p.name, "pid", pid)
			_ = os.Remove(c.pidFile(p.name))
		}
		pid, err := c.start(p)
		if err != nil {
			return err
		}
		logger.V(2).Info("Started", "component", p.name, "pid", pid)
	}
	return cl.waitNodesAdvertise(ctx, 2*time.Minute)
}

// waitNodesAdvertise waits until every simulated node carries an inventory
// and allocatable vgpu-number, vgpu-memory and vgpu-cores.
func (cl *Cluster) waitNodesAdvertise(ctx context.Context, timeout time.Duration) error {
	names := api.DefaultResourceNames()
	want := []corev1.ResourceName{corev1.ResourceName(names.Number), corev1.ResourceName(names.Memory), corev1.ResourceName(names.Cores)}
	deadline := time.Now().Add(timeout)
	for {
		var missing []string
		for _, n := range cl.Nodes {
			node, err := cl.Client.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
			if err != nil {
				missing = append(missing, n.Name+": "+err.Error())
				continue
			}
			if _, ok := node.Annotations[api.InventoryKey]; !ok {
				missing = append(missing, n.Name+": no inventory")
				continue
			}
			for _, r := range want {
				if q, ok := node.Status.Allocatable[r]; !ok || q.IsZero() {
					missing = append(missing, fmt.Sprintf("%s: no allocatable %s", n.Name, r))
					break
				}
			}
		}
		if len(missing) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("simulated nodes not advertising GPUs after %s: %s\n%s", timeout,
				strings.Join(firstN(missing, 5), "; "), cl.Config.logTail(DevicePluginName(cl.Nodes[0].Name), 10))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func firstN(s []string, n int) []string {
	if len(s) > n {
		return append(s[:n:n], fmt.Sprintf("… %d more", len(s)-n))
	}
	return s
}
