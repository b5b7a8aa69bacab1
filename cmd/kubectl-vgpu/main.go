// kubectl-vgpu is a kubectl plugin (copy it onto PATH, run `kubectl vgpu`)
// that shows the cluster's vGPUs from published objects only: per node and
// GPU the model, health, mode, memory and cores booked and tenants; per pod
// the GPUs, memory, cores and compute policy; and why a pod is pending, with
// the GPU that came nearest to fitting. It needs only read access (see
// docs/kubectl-vgpu.md for the role).
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/volcano-vgpu/volcano-vgpu/cmd/kubectl-vgpu/view"
)

const usage = `Usage:
  kubectl vgpu nodes [flags]            every GPU: model, health, mode, memory and cores booked, tenants
  kubectl vgpu pods [-n NS | -A] [flags] pods asking vGPUs: node, GPUs, memory, cores, compute policy
  kubectl vgpu why POD [-n NS] [flags]   why POD is pending, with the GPU nearest to fitting

Flags:
`

var errUsage = errors.New("usage")

func main() {
	if err := run(context.Background(), os.Args[1:], os.Stdout, os.Stderr, nil); err != nil {
		if !errors.Is(err, errUsage) {
			fmt.Fprintln(os.Stderr, "error:", err)
		}
		os.Exit(1)
	}
}

// run is main with its dependencies passed in: client, when non-nil,
// replaces the one built from the kubeconfig flags (tests).
func run(ctx context.Context, args []string, stdout, stderr io.Writer, client kubernetes.Interface) error {
	fs := pflag.NewFlagSet("kubectl-vgpu", pflag.ContinueOnError)
	fs.SetOutput(stderr)
	output := fs.StringP("output", "o", "", "output format: json or yaml (default: a table)")
	all := fs.BoolP("all-namespaces", "A", false, "pods: list the pods of every namespace")
	staleAfter := fs.Duration("stale-after", view.DefaultOptions(time.Time{}).StaleAfter, "inventory heartbeat age after which the scheduler places nothing on a node (its vgpu.staleAfter)")
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	fs.StringVar(&rules.ExplicitPath, "kubeconfig", "", "path to the kubeconfig file (default: $KUBECONFIG, then ~/.kube/config)")
	overrides := &clientcmd.ConfigOverrides{}
	clientcmd.BindOverrideFlags(overrides, fs, clientcmd.RecommendedConfigOverrideFlags(""))
	fs.Usage = func() { fmt.Fprint(stderr, usage); fs.PrintDefaults() }
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return nil
		}
		return err
	}
	if err := view.CheckFormat(*output); err != nil {
		return err
	}
	rest := fs.Args()
	if len(rest) == 0 {
		fs.Usage()
		return errUsage
	}
	switch cmd := rest[0]; {
	case cmd == "nodes" && len(rest) == 1, cmd == "pods" && len(rest) == 1, cmd == "why" && len(rest) == 2:
	default:
		fmt.Fprintf(stderr, "kubectl vgpu: unknown command or wrong arguments: %q\n", rest)
		fs.Usage()
		return errUsage
	}
	cfg := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, overrides)
	namespace, _, err := cfg.Namespace()
	if err != nil {
		return fmt.Errorf("reading the namespace from the kubeconfig: %w", err)
	}
	if client == nil {
		rc, err := cfg.ClientConfig()
		if err != nil {
			return fmt.Errorf("loading the kubeconfig: %w (pass --kubeconfig or set KUBECONFIG)", err)
		}
		rc.UserAgent = "kubectl-vgpu"
		if client, err = kubernetes.NewForConfig(rc); err != nil {
			return err
		}
	}
	o := view.DefaultOptions(time.Now())
	o.StaleAfter = *staleAfter
	var v any
	switch rest[0] {
	case "nodes":
		v, err = view.Nodes(ctx, client, o)
	case "pods":
		if *all {
			namespace = ""
		}
		v, err = view.Pods(ctx, client, namespace, o)
	case "why":
		v, err = view.Why(ctx, client, namespace, rest[1], o)
	}
	if err != nil {
		return err
	}
	return view.Write(stdout, v, *output)
}
