# syntax=docker/dockerfile:1
# vc-scheduler: Volcano's scheduler with the vgpu plugin compiled in, and the
# vgpu-admission webhook (the chart runs it from this image).
# Build from the repository root (make images, or):
#   docker build -f installer/docker/vc-scheduler.Dockerfile -t <prefix>/vc-scheduler:<tag> .
ARG GO_IMAGE=golang:1.24-bookworm
ARG BASE_IMAGE=debian:bookworm-slim

FROM ${GO_IMAGE} AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 go build -trimpath -buildvcs=false -ldflags "-s -w" -o /out/vc-scheduler ./cmd/vc-scheduler && \
    CGO_ENABLED=0 go build -trimpath -buildvcs=false -ldflags "-s -w" -o /out/vgpu-admission ./cmd/vgpu-admission

FROM ${BASE_IMAGE}
COPY --from=build /out/vc-scheduler /out/vgpu-admission /usr/local/bin/
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/vc-scheduler"]
