// Package cluster starts and stops the local test cluster: etcd,
// kube-apiserver, kube-controller-manager, kwok, Volcano's webhook and
// controller managers and our vc-scheduler, all on 127.0.0.1, plus one
// simulated GPU node per entry of a simulated-cluster file (a kwok node, its
// simulated device plugin and the kubelet emulator that drives it).
//
// Every process is started detached with its pid in StateDir/pids, so the
// cluster outlives the command that started it (make cluster) and is reused
// by the e2e tests; Down stops exactly those pids. Up is idempotent: a running,
// healthy cluster is reused, and the leftovers of a crashed run (pid files of
// dead processes, a port held by a process that is not ours) are reported
// with what to do, never waited on.
package cluster

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Ports used on 127.0.0.1. Override with the environment variables named in
// EnvPortBase: every port is the base plus a fixed offset.
type Ports struct {
	EtcdClient, EtcdPeer      int
	APIServer                 int
	SchedulerMetrics          int
	SchedulerHealthz          int
	ControllerMetrics         int
	ControllerHealthz         int
	KwokServer                int
	Webhook                   int
	ControllerManager         int // kube-controller-manager's secure port
	Admission                 int // vgpu-admission's HTTPS port
	DevicePluginMetricsOffset int // first device plugin metrics port; +1 per node
}

// EnvPortBase moves every port of the local cluster (default 24000). A
// cluster on another base also keeps its state apart (_output/local-<base>),
// so several clusters can run side by side.
const EnvPortBase = "VGPU_CLUSTER_PORT_BASE"

// EnvSimFile names the simulated-cluster file whose nodes the cluster creates
// (default e2e/sim/clusters/local.yaml).
const EnvSimFile = "VGPU_SIM_FILE"

// EnvSchedulerConf names the vc-scheduler configuration (default
// config/scheduler/volcano-scheduler.conf).
const EnvSchedulerConf = "VGPU_SCHEDULER_CONF"

// EnvDevicePluginHAMi set to "true" makes the simulated device plugins also
// publish Volcano deviceshare's (HAMi's) node annotations and answer its
// handshake (device plugin config report.hami).
const EnvDevicePluginHAMi = "VGPU_DEVICE_PLUGIN_HAMI"

// EnvDevicePluginGroup set to N > 1 hosts N nodes' device plugins per
// process (Config.DevicePluginGroup).
const EnvDevicePluginGroup = "VGPU_DEVICE_PLUGIN_GROUP"

const defaultPortBase = 24000

func portsFrom(base int) Ports {
	return Ports{
		EtcdClient: base + 1, EtcdPeer: base + 2, APIServer: base + 3,
		SchedulerMetrics: base + 10, SchedulerHealthz: base + 11,
		ControllerMetrics: base + 12, ControllerHealthz: base + 13,
		KwokServer: base + 14, Webhook: base + 15, ControllerManager: base + 16, Admission: base + 17,
		DevicePluginMetricsOffset: base + 100,
	}
}

// Config says where the binaries are, where state goes and what to start.
type Config struct {
	Root          string // repository root
	BinDir        string // built binaries (make build-cluster)
	StateDir      string // pids, logs, certificates, etcd data, kubeconfig
	SocketDir     string // kubelet/device-plugin sockets (short path: 107-byte limit)
	SimFile       string // simulated-cluster file with the nodes to create
	SchedulerConf string // vc-scheduler configuration
	CRDDir        string // Volcano CRDs copied by the Makefile
	StagesFile    string // our kwok stages
	KwokStagesDir string // kwok's shipped stages copied by the Makefile
	Ports         Ports
	// SchedulerWrapper, when set, is the command vc-scheduler is started
	// through (its own arguments follow); its first element must be a binary
	// in BinDir that ends by exec'ing the rest in the same process, so the
	// pid file names vc-scheduler (e2e/bench uses it for a private mount
	// namespace holding in-cluster credentials).
	SchedulerWrapper []string
	// SchedulerEnv is added to vc-scheduler's environment ("KEY=value").
	SchedulerEnv []string
	// SchedulerArgs are appended to vc-scheduler's flags (e2e/bench:
	// --percentage-nodes-to-find).
	SchedulerArgs []string
	// SchedulerPprof serves vc-scheduler's pprof endpoints
	// (/debug/pprof/) beside its metrics, on 127.0.0.1.
	SchedulerPprof bool
	// DevicePluginHAMi: the device plugins also publish deviceshare's
	// annotations (report.hami), so Volcano's deviceshare can use the nodes.
	DevicePluginHAMi bool
	// DevicePluginGroup > 1 hosts that many nodes' device plugins in each
	// vgpu-device-plugin-sim-group process (default: one process per node,
	// which scenarios that kill one node's plugin need).
	DevicePluginGroup int
	// OpenFiles is the open-file limit every agent process inherits (0: this
	// process's hard RLIMIT_NOFILE, which Go raises the soft limit to). A
	// node costs each process that serves it a few sockets, watches and
	// connections, so a process serves at most as many nodes as the limit
	// allows (NodesPerProcess): 5000 nodes in one process would run out.
	OpenFiles uint64
	// NoDevicePluginMetrics: the simulated device plugins serve no /metrics
	// (a thousand nodes would take a thousand ports).
	NoDevicePluginMetrics bool
	// DevicePluginNodeConfig: node → YAML appended to that node's device
	// plugin configuration (top-level keys the shared file does not set, such
	// as sharing), written to its own file; a scenario sets it, restarts that
	// node's plugin, and restores the shared file the same way. One process
	// per node only (DevicePluginGroup 0 or 1).
	DevicePluginNodeConfig map[string]string
	// DevicePluginNodeMIG: node → indexes of its GPUs whose MIG mode the
	// simulated NVML turns on when that node's plugin starts (beside the
	// cluster file's migGPUs), as an administrator would before restarting
	// it; a scenario sets it with the sharing that gives those GPUs mode
	// mig (DevicePluginNodeConfig). One process per node only.
	DevicePluginNodeMIG map[string][]int
}

// DefaultConfig lays everything out under root/_output.
func DefaultConfig(root string) (Config, error) {
	base := defaultPortBase
	if v := os.Getenv(EnvPortBase); v != "" {
		b, err := strconv.Atoi(v)
		if err != nil || b < 1024 || b > 65000 {
			return Config{}, fmt.Errorf("%s=%q: expected a port number from 1024 to 65000", EnvPortBase, v)
		}
		base = b
	}
	out := filepath.Join(root, "_output")
	state := filepath.Join(out, "local")
	if base != defaultPortBase {
		state = fmt.Sprintf("%s-%d", state, base)
	}
	sim := filepath.Join(root, "e2e", "sim", "clusters", "local.yaml")
	if v := os.Getenv(EnvSimFile); v != "" {
		sim = v
		if !filepath.IsAbs(sim) {
			sim = filepath.Join(root, sim)
		}
	}
	conf := filepath.Join(root, "config", "scheduler", "volcano-scheduler.conf")
	if v := os.Getenv(EnvSchedulerConf); v != "" {
		conf = v
		if !filepath.IsAbs(conf) {
			conf = filepath.Join(root, conf)
		}
	}
	hami := false
	if v := os.Getenv(EnvDevicePluginHAMi); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return Config{}, fmt.Errorf("%s=%q: expected true or false", EnvDevicePluginHAMi, v)
		}
		hami = b
	}
	group := 0
	if v := os.Getenv(EnvDevicePluginGroup); v != "" {
		g, err := strconv.Atoi(v)
		if err != nil || g < 0 {
			return Config{}, fmt.Errorf("%s=%q: expected the number of nodes per device plugin process (0 or 1: one process per node)", EnvDevicePluginGroup, v)
		}
		group = g
	}
	return Config{
		Root:              root,
		BinDir:            filepath.Join(out, "bin"),
		StateDir:          state,
		SocketDir:         filepath.Join(os.TempDir(), fmt.Sprintf("vgpu-%d-%d", os.Getuid(), base)),
		SimFile:           sim,
		SchedulerConf:     conf,
		CRDDir:            filepath.Join(out, "crds"),
		StagesFile:        filepath.Join(root, "e2e", "sim", "kwok-stages.yaml"),
		KwokStagesDir:     filepath.Join(out, "kwok-stages"),
		Ports:             portsFrom(base),
		DevicePluginHAMi:  hami,
		DevicePluginGroup: group,
	}, nil
}

// Kubeconfig is the path of the admin kubeconfig Up writes.
func (c Config) Kubeconfig() string { return filepath.Join(c.StateDir, "kubeconfig") }

// ServingCAFile is the apiserver's self-generated certificate with its CA
// appended (127.0.0.1 in its SAN), written on the apiserver's first start.
func (c Config) ServingCAFile() string { return filepath.Join(c.certDir(), "apiserver.crt") }

// AdminTokenFile holds the admin (system:masters) bearer token.
func (c Config) AdminTokenFile() string { return filepath.Join(c.certDir(), "admin.token") }

// Pid returns the pid of a process the harness started (names as in the
// pid directory: "vc-scheduler", DevicePluginName(node), …) and whether it
// is alive.
func (c Config) Pid(name string) (int, bool) { return c.running(name) }

// PidNames lists the processes that have pid files.
func (c Config) PidNames() []string { return c.pidNames() }

func (c Config) logDir() string  { return filepath.Join(c.StateDir, "logs") }
func (c Config) pidDir() string  { return filepath.Join(c.StateDir, "pids") }
func (c Config) certDir() string { return filepath.Join(c.StateDir, "certs") }
func (c Config) bin(name string) string {
	return filepath.Join(c.BinDir, name)
}

// FindRoot walks up from dir to the directory holding go.mod of the main module.
func FindRoot(dir string) (string, error) {
	for d := dir; ; d = filepath.Dir(d) {
		if data, err := os.ReadFile(filepath.Join(d, "go.mod")); err == nil &&
			strings.HasPrefix(string(data), "module github.com/volcano-vgpu/volcano-vgpu\n") {
			return d, nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("no volcano-vgpu checkout above %s: run from the repository", dir)
		}
	}
}
