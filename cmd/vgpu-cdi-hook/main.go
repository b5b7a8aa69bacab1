// Command vgpu-cdi-hook is the OCI createRuntime hook the device plugin's
// per-container CDI device names (kind volcano-vgpu.io/limiter). The
// container runtime runs it on the host, as root, with the OCI state on
// stdin:
//
//	vgpu-cdi-hook preload --file=<host path of the container's ld.so.preload> --library=<libvcuda.so in the container>
//
// It writes the container's preload file as libvcuda.so first, then the
// entries of the image's own /etc/ld.so.preload (package
// device-plugin/preloadhook). A failure fails the container's creation with
// the message, rather than running it without the image's preload.
//
// The device plugin's init container installs the limiter and this hook on
// the host with the same binary (the image has no shell):
//
//	vgpu-cdi-hook install --from=/opt/volcano-vgpu --to=<host limiter directory>
package main

import (
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/preloadhook"
)

func main() {
	if err := run(os.Args[1:], os.Stdin); err != nil {
		fmt.Fprintln(os.Stderr, "vgpu-cdi-hook:", err)
		os.Exit(1)
	}
}

func run(args []string, stdin io.Reader) error {
	if len(args) > 0 && args[0] == installSubcommand {
		return runInstall(args[1:], os.Stdout)
	}
	if len(args) == 0 || args[0] != preloadhook.Subcommand {
		return fmt.Errorf("usage: vgpu-cdi-hook %s --file=PATH --library=PATH (OCI state on stdin), or vgpu-cdi-hook %s --from=DIR --to=DIR", preloadhook.Subcommand, installSubcommand)
	}
	fs := flag.NewFlagSet("vgpu-cdi-hook "+preloadhook.Subcommand, flag.ContinueOnError)
	var a preloadhook.Args
	fs.StringVar(&a.File, "file", "", "the container's ld.so.preload on the host")
	fs.StringVar(&a.Library, "library", "", "libvcuda.so inside the container")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	return preloadhook.Run(stdin, a)
}
