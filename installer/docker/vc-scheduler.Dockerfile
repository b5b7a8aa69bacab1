# syntax=docker/dockerfile:1
# vc-scheduler: Volcano's scheduler with the vgpu plugin compiled in, and the
# vgpu-admission webhook (the chart runs it from this image).
#
# `make images` builds this image with no Docker engine (installer/imagebuild).
# This Dockerfile, for users with Docker, runs that same build inside a build
# stage and copies its files onto an empty base, so both give the same files,
# modes, owners, entrypoint and user (time stamps and digests differ):
# static binaries, /etc/passwd with user 65532, CA certificates, no shell.
# Build from the repository root (make docker-images, or):
#   docker build -f installer/docker/vc-scheduler.Dockerfile -t <prefix>/vc-scheduler:<tag> .
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
    mkdir /rootfs && tar -C /rootfs -xpf /src/_output/images/rootfs/vc-scheduler.tar

FROM scratch
COPY --from=build /rootfs/ /
USER 65532:65532
WORKDIR /
ENV PATH=/usr/local/bin:/usr/bin:/bin
ENTRYPOINT ["/usr/local/bin/vc-scheduler"]
