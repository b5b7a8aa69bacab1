// Module imagebuild builds the project's OCI images without a container
// engine (go-containerregistry). It is separate from the main module so the
// registry library's dependencies never move the main module's pins.
module github.com/volcano-vgpu/volcano-vgpu/installer/imagebuild

go 1.24.0

require github.com/google/go-containerregistry v0.20.6

require (
	github.com/containerd/stargz-snapshotter/estargz v0.16.3 // indirect
	github.com/google/go-cmp v0.7.0 // indirect
	github.com/klauspost/compress v1.18.0 // indirect
	github.com/opencontainers/go-digest v1.0.0 // indirect
	github.com/opencontainers/image-spec v1.1.1 // indirect
	github.com/vbatts/tar-split v0.12.1 // indirect
	golang.org/x/sync v0.15.0 // indirect
)
