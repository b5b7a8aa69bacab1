# syntax=docker/dockerfile:1
# vgpu-device-plugin, carrying libvcuda.so and the CDI hook vgpu-cdi-hook in
# /opt/volcano-vgpu (the chart's init container copies them to the host).
# Build from the repository root (make images, or):
#   docker build -f installer/docker/vgpu-device-plugin.Dockerfile -t <prefix>/vgpu-device-plugin:<tag> .
ARG GO_IMAGE=golang:1.24-bookworm
# libvcuda.so is preloaded into the workload containers, whatever their base
# image; vcuda/src/glibc_floor.h keeps it at glibc 2.28 whatever the build
# image's glibc, and make -C vcuda floor checks it.
ARG LIMITER_BUILD_IMAGE=debian:bullseye
ARG BASE_IMAGE=debian:bookworm-slim

FROM ${GO_IMAGE} AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
# cgo: NVML is loaded with dlopen (go-nvml).
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=1 go build -trimpath -buildvcs=false -ldflags "-s -w" -o /out/vgpu-device-plugin ./cmd/vgpu-device-plugin
# The hook runs on the host, whatever its libc: static.
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 go build -trimpath -buildvcs=false -ldflags "-s -w" -o /out/vgpu-cdi-hook ./cmd/vgpu-cdi-hook

FROM ${LIMITER_BUILD_IMAGE} AS limiter
RUN apt-get update && apt-get install -y --no-install-recommends gcc libc6-dev make && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY vcuda/ vcuda/
RUN make -C vcuda _build/libvcuda.so floor

FROM ${BASE_IMAGE}
COPY --from=build /out/vgpu-device-plugin /usr/local/bin/vgpu-device-plugin
COPY --from=limiter /src/vcuda/_build/libvcuda.so /opt/volcano-vgpu/libvcuda.so
COPY --from=build /out/vgpu-cdi-hook /opt/volcano-vgpu/vgpu-cdi-hook
ENTRYPOINT ["/usr/local/bin/vgpu-device-plugin"]
