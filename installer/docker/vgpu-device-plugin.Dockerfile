# syntax=docker/dockerfile:1
# vgpu-device-plugin (cgo), carrying libvcuda.so and the CDI hook
# vgpu-cdi-hook in /opt/volcano-vgpu; the chart's init container copies them
# to the host with `vgpu-cdi-hook install` (the image has no shell).
#
# `make images` builds this image with no Docker engine (installer/imagebuild).
# This Dockerfile, for users with Docker, runs that same build inside a build
# stage and copies its files onto an empty base, so both give the same files,
# modes, owners, entrypoint and user (time stamps and digests differ): glibc
# from Debian's libc6 (libraries and loader only), the binaries, CA
# certificates. libvcuda.so keeps its glibc floor (vcuda/src/glibc_floor.h,
# checked by make -C vcuda floor) whatever the build image's glibc.
# Build from the repository root (make docker-images, or):
#   docker build -f installer/docker/vgpu-device-plugin.Dockerfile -t <prefix>/vgpu-device-plugin:<tag> .
ARG GO_IMAGE=golang:1.24-bookworm

FROM ${GO_IMAGE} AS build
# (apt's lists are kept: make images fetches libc6 and ca-certificates with apt-get download)
RUN apt-get update && apt-get install -y --no-install-recommends gcc libc6-dev make binutils
WORKDIR /src
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    make images IMAGE_TAG=docker-build IMAGEBUILD_FLAGS=-rootfs && \
    mkdir /rootfs && tar -C /rootfs -xpf /src/_output/images/rootfs/vgpu-device-plugin.tar

FROM scratch
COPY --from=build /rootfs/ /
USER 0:0
WORKDIR /
ENV PATH=/usr/local/bin:/usr/bin:/bin
ENTRYPOINT ["/usr/local/bin/vgpu-device-plugin"]
