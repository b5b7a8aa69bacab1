// Package kubeclient builds the API clients of our long-running processes
// (the device plugin, and the harness's kubelet emulator and simulated device
// plugins) the same way: from a kubeconfig file or the in-cluster service
// account, with their own request rate and user agent.
package kubeclient

import (
	"fmt"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// Config reads kubeconfig (empty: the in-cluster service account) and sets
// the client's rate (qps requests a second, bursts of burst) and user agent.
func Config(kubeconfig, userAgent string, qps float32, burst int) (*rest.Config, error) {
	c, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		if kubeconfig == "" {
			return nil, fmt.Errorf("in-cluster API access: %w (outside the cluster, pass --kubeconfig)", err)
		}
		return nil, fmt.Errorf("kubeconfig %q: %w (inside the cluster, omit --kubeconfig)", kubeconfig, err)
	}
	c.QPS, c.Burst, c.UserAgent = qps, burst, userAgent
	return c, nil
}

// New is a clientset built from Config.
func New(kubeconfig, userAgent string, qps float32, burst int) (*kubernetes.Clientset, error) {
	c, err := Config(kubeconfig, userAgent, qps, burst)
	if err != nil {
		return nil, err
	}
	return kubernetes.NewForConfig(c)
}
