package main

import (
	"errors"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/volcano-vgpu/volcano-vgpu/e2e/sim/simconfig"
)

func localFile(t *testing.T) (simconfig.File, string) {
	t.Helper()
	_, here, _, _ := runtime.Caller(0)
	path := filepath.Join(filepath.Dir(here), "..", "..", "sim", "clusters", "local.yaml")
	f, err := simconfig.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	return f, path
}

func TestNodeConfigGivesEveryNodeItsOwnPaths(t *testing.T) {
	type paths struct{ Plugins, Kubelet, PodResources, State, Metrics, CDISpecs string }
	tests := []struct {
		name        string
		metricsPort int
		node        string
		index       int
		want        paths
	}{
		{name: "first node, metrics on", metricsPort: 29800, node: "a100-80g-0", index: 0, want: paths{
			Plugins: "/b/a100-80g-0/device-plugins", Kubelet: "/b/a100-80g-0/device-plugins/kubelet.sock",
			PodResources: "/b/a100-80g-0/pod-resources/kubelet.sock", State: "/b/a100-80g-0/state", CDISpecs: "/b/a100-80g-0/cdi", Metrics: "127.0.0.1:29800",
		}},
		{name: "third node's port is the base + 2", metricsPort: 29800, node: "l4-0", index: 2, want: paths{
			Plugins: "/b/l4-0/device-plugins", Kubelet: "/b/l4-0/device-plugins/kubelet.sock",
			PodResources: "/b/l4-0/pod-resources/kubelet.sock", State: "/b/l4-0/state", CDISpecs: "/b/l4-0/cdi", Metrics: "127.0.0.1:29802",
		}},
		{name: "metrics port 0 serves none", node: "l4-1", index: 5, want: paths{
			Plugins: "/b/l4-1/device-plugins", Kubelet: "/b/l4-1/device-plugins/kubelet.sock",
			PodResources: "/b/l4-1/pod-resources/kubelet.sock", State: "/b/l4-1/state", CDISpecs: "/b/l4-1/cdi",
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := options{baseDir: "/b", metricsPort: tc.metricsPort}
			c, err := o.nodeConfig(tc.node, tc.index)
			if err != nil {
				t.Fatal(err)
			}
			got := paths{c.Kubelet.DevicePluginsDir, c.Kubelet.KubeletSocket, c.Kubelet.PodResourcesSocket, c.StateDir, c.MetricsAddress, c.CDI.SpecDir}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("paths (-want +got):\n%s", diff)
			}
		})
	}
}

func TestSimNodesFindsTheNamedNodesInOrder(t *testing.T) {
	file, path := localFile(t)
	o := options{simFile: path, nodes: []string{"l4-1", "a100-80g-0"}}
	nodes, err := o.simNodes(file)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, n := range nodes {
		got = append(got, n.Name)
	}
	if diff := cmp.Diff([]string{"l4-1", "a100-80g-0"}, got); diff != "" {
		t.Errorf("nodes (-want +got):\n%s", diff)
	}
}

func TestSimNodesRefuses(t *testing.T) {
	file, path := localFile(t)
	if _, err := (options{simFile: path}).simNodes(file); !errors.Is(err, errNoNodes) {
		t.Errorf("no --nodes: err = %v, want errNoNodes", err)
	}
	if _, err := (options{simFile: path, nodes: []string{"h100-0"}}).simNodes(file); err == nil {
		t.Error("a node missing from the file was accepted")
	}
}
