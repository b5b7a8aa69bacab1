//go:build e2e

// Package tests holds the end-to-end tests. They run against the local
// cluster (e2e/cluster): one that is already running (make cluster) is
// reused and left running; otherwise one is started for this test binary and
// stopped at the end.
package tests

import (
	"context"
	"flag"
	"fmt"
	"os"
	"testing"

	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	vcclient "volcano.sh/apis/pkg/client/clientset/versioned"

	"github.com/volcano-vgpu/volcano-vgpu/e2e/cluster"
)

// env is the cluster shared by every test of this binary.
type env struct {
	cl   *cluster.Cluster
	kube kubernetes.Interface
	vc   vcclient.Interface
}

var shared env // set once in TestMain, read-only afterwards

func TestMain(m *testing.M) {
	klog.InitFlags(nil)
	flag.Parse()
	os.Exit(run(m))
}

func run(m *testing.M) int {
	ctx := klog.NewContext(context.Background(), klog.Background())
	wd, _ := os.Getwd()
	root, err := cluster.FindRoot(wd)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	cfg, err := cluster.DefaultConfig(root)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	// Up stops whatever it started itself when it fails.
	cl, err := cluster.Up(ctx, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e: local cluster:", err)
		return 1
	}
	if cl.Started && os.Getenv("VGPU_KEEP_CLUSTER") == "" {
		defer func() {
			if err := cluster.Down(ctx, cfg); err != nil {
				fmt.Fprintln(os.Stderr, "e2e: cluster-down:", err)
			}
		}()
	}
	vc, err := vcclient.NewForConfig(cl.RestConfig)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	shared = env{cl: cl, kube: cl.Client, vc: vc}
	return m.Run()
}
