package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/volcano-vgpu/volcano-vgpu/installer/imagebuild/layer"
)

// build assembles one image: its layers on an empty base, every time stamp
// at epoch seconds. It keeps Docker's manifest media types (which every
// registry and runtime takes): a docker-archive tarball stores no manifest,
// and the one a reader rebuilds from it (crane push) is then byte for byte
// the one images.txt names.
func build(s imageSpec, arch string, epoch int64) (v1.Image, error) {
	t := time.Unix(epoch, 0).UTC()
	img := empty.Image
	for _, ls := range s.layers {
		data, err := layer.Tar(ls.entries, t)
		if err != nil {
			return nil, fmt.Errorf("layer %q: %w", ls.name, err)
		}
		l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
			return io.NopCloser(bytes.NewReader(data)), nil
		})
		if err != nil {
			return nil, fmt.Errorf("layer %q: %w", ls.name, err)
		}
		img, err = mutate.Append(img, mutate.Addendum{
			Layer:   l,
			History: v1.History{Created: v1.Time{Time: t}, CreatedBy: "imagebuild: " + ls.name},
		})
		if err != nil {
			return nil, fmt.Errorf("layer %q: %w", ls.name, err)
		}
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.Architecture, cf.OS = arch, "linux"
	cf.Created = v1.Time{Time: t}
	cf.Config.Entrypoint = s.entrypoint
	cf.Config.User = s.user
	cf.Config.WorkingDir = "/"
	cf.Config.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin"}
	cf.Config.Labels = s.labels
	return mutate.ConfigFile(img, cf)
}

// write stores img as <out>/<name>.tar and <out>/oci/<name>, each replaced
// whole, and returns its line for images.txt.
func write(out, imgName string, ref name.Tag, img v1.Image) (string, error) {
	if err := os.MkdirAll(out, 0o755); err != nil {
		return "", err
	}
	tarPath := filepath.Join(out, imgName+".tar")
	tmp := tarPath + ".new"
	if err := tarball.WriteToFile(tmp, ref, img); err != nil {
		return "", fmt.Errorf("writing %s: %w", tarPath, err)
	}
	if err := os.Rename(tmp, tarPath); err != nil {
		return "", err
	}
	dir := filepath.Join(out, "oci", imgName)
	if err := os.RemoveAll(dir); err != nil {
		return "", err
	}
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return "", fmt.Errorf("writing %s: %w", dir, err)
	}
	if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{
		"org.opencontainers.image.ref.name": ref.TagStr(),
	})); err != nil {
		return "", fmt.Errorf("writing %s: %w", dir, err)
	}
	digest, err := img.Digest()
	if err != nil {
		return "", err
	}
	size, err := compressedSize(img)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("%s %s %d", ref, digest, size), nil
}

// compressedSize is what a registry stores: the layers as pushed, plus the
// config and the manifest.
func compressedSize(img v1.Image) (int64, error) {
	m, err := img.Manifest()
	if err != nil {
		return 0, err
	}
	raw, err := img.RawManifest()
	if err != nil {
		return 0, err
	}
	n := int64(len(raw)) + m.Config.Size
	for _, l := range m.Layers {
		n += l.Size
	}
	return n, nil
}

func writeIndex(out string, lines []string) error {
	return os.WriteFile(filepath.Join(out, "images.txt"), []byte(strings.Join(lines, "\n")+"\n"), 0o644)
}

// writeRootfs stores img's files, its layers applied in order, as
// <out>/rootfs/<name>.tar.
func writeRootfs(out, imgName string, img v1.Image) error {
	dir := filepath.Join(out, "rootfs")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	f, err := os.Create(filepath.Join(dir, imgName+".tar"))
	if err != nil {
		return err
	}
	rc := mutate.Extract(img)
	defer rc.Close()
	if _, err := io.Copy(f, rc); err != nil {
		f.Close()
		return fmt.Errorf("writing %s: %w", f.Name(), err)
	}
	return f.Close()
}
