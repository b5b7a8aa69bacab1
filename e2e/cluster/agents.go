package cluster

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"github.com/volcano-vgpu/volcano-vgpu/api"
	"github.com/volcano-vgpu/volcano-vgpu/e2e/containeremu"
	"github.com/volcano-vgpu/volcano-vgpu/e2e/sim/nvmlsim"
)

// The node agents: one kubelet emulator for every simulated node (kwok runs
// no kubelet) and the nodes' device plugins, each with its own
// device-plugins directory, PodResources socket and state under
// SocketDir/<node>. By default every node's plugin is its own process,
// vgpu-device-plugin-sim (the shipped plugin's code on a simulated NVML,
// e2e/cmd/vgpu-device-plugin-sim), so a scenario can kill one node's plugin;
// with DevicePluginGroup > 1, groups of that many nodes share one
// vgpu-device-plugin-sim-group process (each node still its own plugin,
// socket and state), which is what lets a thousand nodes run on one small
// machine. See e2e/kubeletemu for what the emulator does.

// EmulatorName is the pid/log name of the kubelet emulator (the first one
// when the nodes need several: EmulatorHosts).
const EmulatorName = "kubelet-emulator"

// Open files a node costs the process serving it, with room to spare:
// measured on the simulated cluster (a 5000-node group process ran out of
// its 20000 at "too many open files"). A device plugin holds its gRPC
// listener, kubelet's connection to it, its PodResources connection and an
// fsnotify watcher (inotify and wakeup descriptors); the kubelet emulator
// holds the node's kubelet and PodResources listeners, the plugin's
// PodResources connection and its connection to the plugin.
const (
	pluginFilesPerNode   = 10
	emulatorFilesPerNode = 6
	reservedFiles        = 1024 // the API connection, logs, state files
)

// NodesPerProcess is how many nodes one agent process may serve, given
// filesPerNode, within the open-file limit (at least one).
func (c Config) NodesPerProcess(filesPerNode int) int {
	limit := c.OpenFiles
	if limit == 0 {
		var r syscall.Rlimit
		if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r); err != nil || r.Max == math.MaxUint64 { // RLIM_INFINITY
			return math.MaxInt
		}
		limit = r.Max
	}
	if limit <= reservedFiles {
		return 1
	}
	return max(int((limit-reservedFiles)/uint64(filesPerNode)), 1)
}

// EmulatorHosts lays the nodes out on kubelet emulator processes: one for
// all, or as many as the open-file limit needs (the first named
// EmulatorName, then EmulatorName-1, -2, …).
func (c Config) EmulatorHosts(nodes []string) []PluginHost {
	per := c.NodesPerProcess(emulatorFilesPerNode)
	var out []PluginHost
	for first := 0; first < len(nodes); first += per {
		last := min(first+per, len(nodes))
		name := EmulatorName
		if len(out) > 0 {
			name = fmt.Sprintf("%s-%d", EmulatorName, len(out))
		}
		out = append(out, PluginHost{Name: name, Nodes: nodes[first:last:last], First: first})
	}
	return out
}

// DevicePluginName is the pid/log name of a node's device plugin when it
// runs in a process of its own.
func DevicePluginName(node string) string { return "device-plugin-" + node }

// DevicePluginGroupName is the pid/log name of the k-th process hosting a
// group of nodes' device plugins.
func DevicePluginGroupName(k int) string { return fmt.Sprintf("device-plugin-group-%d", k) }

// PluginHost is one device plugin process and the nodes it simulates.
type PluginHost struct {
	Name  string   // pid/log name
	Nodes []string // in the cluster's node order
	First int      // index of Nodes[0] in the cluster's nodes
}

// PluginHosts lays the nodes out on device plugin processes: one per node,
// or groups of DevicePluginGroup consecutive nodes (fewer where the
// open-file limit needs it: NodesPerProcess).
func (c Config) PluginHosts(nodes []string) []PluginHost {
	var out []PluginHost
	if c.DevicePluginGroup <= 1 {
		for i, n := range nodes {
			out = append(out, PluginHost{Name: DevicePluginName(n), Nodes: []string{n}, First: i})
		}
		return out
	}
	per := min(c.DevicePluginGroup, c.NodesPerProcess(pluginFilesPerNode))
	for first := 0; first < len(nodes); first += per {
		last := min(first+per, len(nodes))
		out = append(out, PluginHost{Name: DevicePluginGroupName(len(out)), Nodes: nodes[first:last:last], First: first})
	}
	return out
}

// NodeDir is where a node's sockets, records and limiter state live.
func (c Config) NodeDir(node string) string { return filepath.Join(c.SocketDir, node) }

// RecordsDir is where the kubelet emulator records a node's Allocate answers.
func (c Config) RecordsDir(node string) string { return filepath.Join(c.NodeDir(node), "records") }

// devicePluginConfig writes the device plugin configuration the simulated
// nodes share: the limiter library is the one built in vcuda/_build; CDI mode
// (the default) with the hook built in the bin directory; with
// DevicePluginHAMi the plugins also publish deviceshare's annotations. Each
// node's plugin writes its CDI specs in its own directory (--cdi-spec-dir,
// NodeDir/cdi, where the container emulator reads them), as each real node
// has its own /var/run/cdi: a plugin removes the specs there of pods it does
// not hold, so one directory for all would lose other nodes' specs. The
// file's specDir is never used. MPS GPUs (none unless a node's own
// DevicePluginNodeConfig names some) run the fake control daemon
// (e2e/cmd/fake-mps-control), checked every 2s.
func (c Config) devicePluginConfig() (string, error) {
	if err := c.writeToolkitSpec(); err != nil {
		return "", err
	}
	path := filepath.Join(c.StateDir, "device-plugin.yaml")
	return path, os.WriteFile(path, []byte(c.devicePluginConfigBody()), 0o644)
}

// SimDriverLibrary is the driver library the simulated NVIDIA toolkit spec
// mounts (spec-level containerEdits, as nvidia-ctk writes for libcuda): the
// plugin copies it into its spec of a container's MIG devices.
const SimDriverLibrary = "/usr/lib/x86_64-linux-gnu/libcuda.so.sim"

// ToolkitSpecDir is the directory of the simulated NVIDIA toolkit spec
// every node's plugin reads (cdi.toolkitSpecDirs): spec-level edits only;
// the container emulator resolves the toolkit's nvidia.com/gpu names itself.
func (c Config) ToolkitSpecDir() string { return filepath.Join(c.StateDir, "toolkit-cdi") }

func (c Config) writeToolkitSpec() error {
	if err := os.MkdirAll(c.ToolkitSpecDir(), 0o755); err != nil {
		return err
	}
	body := fmt.Sprintf("cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices: []\ncontainerEdits:\n"+
		"  env: [NVIDIA_VISIBLE_DEVICES=void]\n  deviceNodes: [{path: /dev/nvidiactl}]\n"+
		"  mounts: [{hostPath: %[1]s, containerPath: %[1]s, options: [ro, nosuid, nodev, bind]}]\n", SimDriverLibrary)
	return os.WriteFile(filepath.Join(c.ToolkitSpecDir(), "nvidia.yaml"), []byte(body), 0o644)
}

func (c Config) devicePluginConfigBody() string {
	lib := filepath.Join(c.Root, "vcuda", "_build", "libvcuda.so")
	// A short quiet period and probe interval let the GPU-fault scenarios
	// see a recovery in seconds; pods whose Allocate failed are handed back.
	specDir := filepath.Join(c.SocketDir, "cdi-per-node")
	body := fmt.Sprintf("version: v1\nlimiter:\n  hostLibrary: %s\ncdi:\n  specDir: %s\n  hookPath: %s\n  toolkitSpecDirs: [%s]\n"+
		"health:\n  recoveryPeriod: 10s\n  probeInterval: 2s\nallocate:\n  reschedule: true\n"+
		"mps:\n  controlCommand: %s\n  probeInterval: 2s\nreport:\n  heartbeatPeriod: 1m\n",
		lib, specDir, c.bin("vgpu-cdi-hook"), c.ToolkitSpecDir(), c.bin("fake-mps-control"))
	if c.DevicePluginHAMi {
		body += "  hami: true\n"
	}
	return body
}

// nodeDevicePluginConfig is the configuration file of node's plugin: the
// shared one, or its own with the node's DevicePluginNodeConfig appended.
func (c Config) nodeDevicePluginConfig(node, shared string) (string, error) {
	if _, mig := c.DevicePluginNodeMIG[node]; mig && c.DevicePluginGroup > 1 {
		return "", fmt.Errorf("DevicePluginNodeMIG for node %s: needs one device plugin process per node (DevicePluginGroup %d)", node, c.DevicePluginGroup)
	}
	extra, ok := c.DevicePluginNodeConfig[node]
	if !ok {
		return shared, nil
	}
	if c.DevicePluginGroup > 1 {
		return "", fmt.Errorf("DevicePluginNodeConfig for node %s: needs one device plugin process per node (DevicePluginGroup %d)", node, c.DevicePluginGroup)
	}
	path := filepath.Join(c.StateDir, "device-plugin-"+node+".yaml")
	return path, os.WriteFile(path, []byte(c.devicePluginConfigBody()+strings.TrimSuffix(extra, "\n")+"\n"), 0o644)
}

// MIGMinorsFile is node's simulated /proc/driver/nvidia-caps/mig-minors:
// the driver's MIG capability minors, which the node's device plugin names
// the device nodes of its MIG devices' CDI specs after.
func (c Config) MIGMinorsFile(node string) string {
	return filepath.Join(c.NodeDir(node), "mig-minors")
}

// writeMIGMinors writes node's MIGMinorsFile, as the driver lists them.
func (c Config) writeMIGMinors(node string) error {
	if err := os.MkdirAll(c.NodeDir(node), 0o755); err != nil {
		return err
	}
	return os.WriteFile(c.MIGMinorsFile(node), []byte(nvmlsim.MIGMinors()), 0o644)
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
	var procs []proc
	if hosts := c.EmulatorHosts(cl.nodeNames()); len(hosts) == 1 {
		procs = append(procs, proc{name: EmulatorName, args: []string{c.bin("kubelet-emulator"), kubeconfig,
			"--base-dir=" + c.SocketDir, "--nodes-from=" + c.SimFile}})
	} else {
		for _, h := range hosts {
			procs = append(procs, proc{name: h.Name, args: []string{c.bin("kubelet-emulator"), kubeconfig,
				"--base-dir=" + c.SocketDir, "--nodes=" + strings.Join(h.Nodes, ",")}})
		}
	}
	for _, h := range c.PluginHosts(cl.nodeNames()) {
		conf, err := c.nodeDevicePluginConfig(h.Nodes[0], dpConf)
		if err != nil {
			return err
		}
		if c.DevicePluginGroup <= 1 {
			if err := c.writeMIGMinors(h.Nodes[0]); err != nil {
				return err
			}
		}
		procs = append(procs, c.pluginProc(h, kubeconfig, conf, emu))
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
	// a thousand nodes take a while to start: allow 200ms each beyond 2 minutes
	return cl.waitNodesAdvertise(ctx, max(2*time.Minute, time.Duration(len(cl.Nodes))*200*time.Millisecond))
}

// pluginProc is the process of h: vgpu-device-plugin-sim for one node,
// vgpu-device-plugin-sim-group for a group.
func (c Config) pluginProc(h PluginHost, kubeconfig, dpConf string, emu containeremu.Config) proc {
	metricsPort := c.Ports.DevicePluginMetricsOffset + h.First
	if c.NoDevicePluginMetrics {
		metricsPort = 0
	}
	if c.DevicePluginGroup > 1 {
		return proc{name: h.Name, args: []string{c.bin("vgpu-device-plugin-sim-group"), kubeconfig,
			"--config=" + dpConf, "--sim-file=" + c.SimFile, "--base-dir=" + c.SocketDir,
			"--nodes=" + strings.Join(h.Nodes, ","), fmt.Sprintf("--metrics-port=%d", metricsPort)}}
	}
	node := h.Nodes[0]
	dir := c.NodeDir(node)
	metrics := fmt.Sprintf("--metrics-address=127.0.0.1:%d", metricsPort)
	if metricsPort == 0 {
		metrics = "--metrics-address=off"
	}
	args := []string{c.bin("vgpu-device-plugin-sim"), kubeconfig,
		"--config=" + dpConf, "--node-name=" + node, "--sim-file=" + c.SimFile,
		"--device-plugins-dir=" + filepath.Join(dir, "device-plugins"),
		"--pod-resources-socket=" + filepath.Join(dir, "pod-resources", "kubelet.sock"),
		"--state-dir=" + filepath.Join(dir, "state"),
		"--cdi-spec-dir=" + emu.NodeCDISpecDir(node),
		"--mig-minors=" + c.MIGMinorsFile(node),
		// the compute controller on the fake driver, over the GPU state files the
		// container emulator gives this node's containers
		"--fake-nvml=" + filepath.Join(emu.DriverDir, "libnvidia-ml.so.1"),
		"--fake-gpu-dir=" + emu.NodeGPUDir(node),
		// its containers' processes, in the cgroups the emulated runtime gives them
		"--fake-proc-root=" + emu.NodeProcRoot(node),
		metrics}
	if gpus := c.DevicePluginNodeMIG[node]; len(gpus) > 0 {
		idx := make([]string, len(gpus))
		for i, g := range gpus {
			idx[i] = strconv.Itoa(g)
		}
		args = append(args, "--mig-gpus="+strings.Join(idx, ","))
	}
	return proc{name: h.Name, args: args}
}

func (cl *Cluster) nodeNames() []string {
	out := make([]string, len(cl.Nodes))
	for i, n := range cl.Nodes {
		out[i] = n.Name
	}
	return out
}

// waitNodesAdvertise waits until every simulated node carries an inventory
// and allocatable vgpu-number, vgpu-memory and vgpu-cores.
func (cl *Cluster) waitNodesAdvertise(ctx context.Context, timeout time.Duration) error {
	names := api.DefaultResourceNames()
	want := []corev1.ResourceName{corev1.ResourceName(names.Number), corev1.ResourceName(names.Memory), corev1.ResourceName(names.Cores)}
	deadline := time.Now().Add(timeout)
	for {
		var missing []string
		byName := map[string]*corev1.Node{}
		list, err := cl.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			missing = append(missing, "listing nodes: "+err.Error())
		} else {
			for i := range list.Items {
				byName[list.Items[i].Name] = &list.Items[i]
			}
		}
		for _, n := range cl.Nodes {
			node, ok := byName[n.Name]
			if !ok {
				missing = append(missing, n.Name+": not listed")
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
				strings.Join(firstN(missing, 5), "; "), cl.Config.logTail(cl.Config.PluginHosts(cl.nodeNames())[0].Name, 10))
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
