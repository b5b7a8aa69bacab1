// Command imagebuild builds the project's two images without a container
// engine or a base image to pull: vc-scheduler (static binaries on an empty
// base) and vgpu-device-plugin (a cgo binary on glibc from Debian's libc6).
// `make images` builds the binaries and fetches the packages, then runs it:
//
//	imagebuild -bin DIR -libc6 TAR -libc6-version V -ca-certificates TAR -ca-certificates-version V \
//	  -prefix volcano-vgpu -tag 0.1.0 -out _output/images
//
// For each image it writes <out>/<name>.tar (a docker-archive tarball:
// `crane push`, `docker load`, `ctr images import`) and <out>/oci/<name> (an
// OCI image layout: `skopeo copy oci:...`), and one line per image in
// <out>/images.txt: reference, manifest digest, compressed size. The same
// inputs give the same bytes: entries sorted, one fixed time
// (SOURCE_DATE_EPOCH, else the Unix epoch), no host user names.
package main

import (
	"flag"
	"fmt"
	"os"
	"runtime"
	"strconv"

	"github.com/google/go-containerregistry/pkg/name"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "imagebuild:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("imagebuild", flag.ContinueOnError)
	var in Inputs
	fs.StringVar(&in.Bin, "bin", "", "directory with vc-scheduler, vgpu-admission, vgpu-device-plugin, vgpu-cdi-hook and libvcuda.so")
	fs.StringVar(&in.Libc6, "libc6", "", "data tar of Debian's libc6 (dpkg-deb --fsys-tarfile)")
	fs.StringVar(&in.Libc6Version, "libc6-version", "", "its version (dpkg-deb -f DEB Version)")
	fs.StringVar(&in.CACerts, "ca-certificates", "", "data tar of Debian's ca-certificates")
	fs.StringVar(&in.CACertsVersion, "ca-certificates-version", "", "its version")
	prefix := fs.String("prefix", "volcano-vgpu", "repository prefix: [REGISTRY/PROJECT/]volcano-vgpu")
	tag := fs.String("tag", "", "image tag (the chart's appVersion)")
	out := fs.String("out", "", "output directory")
	arch := fs.String("arch", runtime.GOARCH, "architecture the binaries were built for")
	rootfs := fs.Bool("rootfs", false, "also write <out>/rootfs/<name>.tar, each image's files as one tar (the Dockerfiles copy them onto scratch)")
	epoch := fs.String("source-date-epoch", os.Getenv("SOURCE_DATE_EPOCH"), "time stamp of every file and of the images, in seconds since the epoch (default $SOURCE_DATE_EPOCH, else 0)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	for flagName, v := range map[string]string{"-bin": in.Bin, "-libc6": in.Libc6, "-libc6-version": in.Libc6Version,
		"-ca-certificates": in.CACerts, "-ca-certificates-version": in.CACertsVersion, "-tag": *tag, "-out": *out} {
		if v == "" {
			return fmt.Errorf("%s is required (make images sets it)", flagName)
		}
	}
	var sde int64
	if *epoch != "" {
		v, err := strconv.ParseInt(*epoch, 10, 64)
		if err != nil || v < 0 {
			return fmt.Errorf("-source-date-epoch / SOURCE_DATE_EPOCH: expected whole seconds since 1970, got %q", *epoch)
		}
		sde = v
	}
	specs, err := specs(in)
	if err != nil {
		return err
	}
	var lines []string
	for _, s := range specs {
		ref, err := name.NewTag(*prefix + "/" + s.name + ":" + *tag)
		if err != nil {
			return fmt.Errorf("image reference from -prefix %q and -tag %q: %w (IMAGE_REGISTRY is REGISTRY[/PROJECT], IMAGE_TAG a tag)", *prefix, *tag, err)
		}
		img, err := build(s, *arch, sde)
		if err != nil {
			return fmt.Errorf("%s: %w", s.name, err)
		}
		line, err := write(*out, s.name, ref, img)
		if err != nil {
			return fmt.Errorf("%s: %w", s.name, err)
		}
		if *rootfs {
			if err := writeRootfs(*out, s.name, img); err != nil {
				return fmt.Errorf("%s: %w", s.name, err)
			}
		}
		fmt.Println(line)
		lines = append(lines, line)
	}
	return writeIndex(*out, lines)
}
