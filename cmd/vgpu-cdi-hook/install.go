package main

import (
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/atomicfile"
)

// installSubcommand copies the limiter and this hook from the device
// plugin's image to the host, so the image needs no shell, cp or mv (its
// init container runs `vgpu-cdi-hook install --from=... --to=...`).
const installSubcommand = "install"

// installedFile is one file install copies, with the mode it gets on the host.
type installedFile struct {
	name string
	mode fs.FileMode
}

// installedFiles are what the image carries in its limiter directory and
// the host needs: kubelet mounts libvcuda.so into containers, the container
// runtime runs vgpu-cdi-hook.
func installedFiles() []installedFile {
	return []installedFile{
		{name: "libvcuda.so", mode: 0o644},
		{name: "vgpu-cdi-hook", mode: 0o755},
	}
}

// runInstall parses install's flags and copies each file: written next to
// the old copy, fsync'd and renamed over it, so a running container keeps
// the file it mapped and a crash leaves the old file or the new, never a
// torn one.
func runInstall(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("vgpu-cdi-hook "+installSubcommand, flag.ContinueOnError)
	from := fs.String("from", "", "directory in the image holding libvcuda.so and vgpu-cdi-hook")
	to := fs.String("to", "", "host directory to install them in (must exist)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("install: unexpected arguments %q", fs.Args())
	}
	if err := install(*from, *to); err != nil {
		return err
	}
	for _, f := range installedFiles() {
		fmt.Fprintf(stdout, "installed %s in %s\n", f.name, *to)
	}
	return nil
}

func install(from, to string) error {
	for flagName, dir := range map[string]string{"--from": from, "--to": to} {
		if !filepath.IsAbs(dir) {
			return fmt.Errorf("install: %s: expected an absolute directory, got %q", flagName, dir)
		}
	}
	if st, err := os.Stat(to); err != nil || !st.IsDir() {
		return fmt.Errorf("install: --to=%s is not a directory (mount the host's limiter directory there): %v", to, err)
	}
	for _, f := range installedFiles() {
		src := filepath.Join(from, f.name)
		data, err := os.ReadFile(src)
		if err != nil {
			return fmt.Errorf("install: reading %s (is --from the image's limiter directory?): %w", src, err)
		}
		if err := atomicfile.Write(filepath.Join(to, f.name), data, f.mode); err != nil {
			return fmt.Errorf("install: %s: %w", f.name, err)
		}
	}
	return nil
}
