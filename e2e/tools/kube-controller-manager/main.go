// Command kube-controller-manager is the upstream controller manager, built
// for the local test cluster. The harness runs only the controllers a
// cluster without kubelets still needs: garbage collection (pods of a
// deleted Volcano Job) and namespace deletion.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/kubernetes/cmd/kube-controller-manager/app"
)

func main() {
	os.Exit(cli.Run(app.NewControllerManagerCommand()))
}
