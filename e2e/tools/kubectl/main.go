// Command kubectl is the upstream kubectl, built for use against the local
// test cluster without downloading a release binary.
package main

import (
	"k8s.io/component-base/cli"
	"k8s.io/kubectl/pkg/cmd"
)

func main() {
	command := cmd.NewDefaultKubectlCommand()
	if err := cli.RunNoErrOutput(command); err != nil {
		cmd.CheckErr(err)
	}
}
