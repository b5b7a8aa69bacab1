// Command fake-mps-control stands in for nvidia-cuda-mps-control on the
// simulated cluster (package e2e/sim/mpsfake). Never shipped.
package main

import (
	"os"

	"github.com/volcano-vgpu/volcano-vgpu/e2e/sim/mpsfake"
)

func main() { os.Exit(mpsfake.Main(os.Args[1:], os.Stdin, os.Stdout, os.Stderr)) }
