# Installer targets, included from the top-level Makefile (which defines GO,
# ROOT, BIN). The chart is rendered and checked with helm, built once from its
# Go module and cached in $(BIN).
#
#   make helm             build helm $(HELM_VERSION) into $(BIN) (once)
#   make installer-test   helm lint + template the chart with several value sets,
#                         golden files, values that must fail, rendered configs
#                         parsed by the binaries' own parsers
#   make manifests        re-render installer/manifests/ (and the golden files
#                         under installer/testdata/) from the chart
#   make images           docker build the two images (needs a Docker engine);
#                         IMAGE_REGISTRY means what the chart's imageRegistry means

HELM_VERSION ?= v3.19.0
HELM         := $(BIN)/helm
IMAGE_REGISTRY ?=
IMAGE_PREFIX := $(if $(IMAGE_REGISTRY),$(patsubst %/,%,$(IMAGE_REGISTRY))/)volcano-vgpu
IMAGE_TAG    ?= $(shell sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\}/\1/p' $(ROOT)/installer/helm/volcano-vgpu/Chart.yaml)
DOCKER       ?= docker

.PHONY: helm installer-test manifests images

helm: $(HELM)

$(HELM):
	@mkdir -p $(BIN)
	GOBIN=$(BIN) GOFLAGS= $(GO) install -ldflags "-s -w" helm.sh/helm/v3/cmd/helm@$(HELM_VERSION)

# VGPU_HELM makes the tests mandatory: without it they skip when helm is
# missing (a plain `go test ./...`).
installer-test: $(HELM)
	VGPU_HELM=$(HELM) $(GO) test -count=1 ./installer/...

manifests: $(HELM)
	VGPU_HELM=$(HELM) $(GO) test -count=1 ./installer/ -run 'TestGolden' -update

# The build context is the repository root; each Dockerfile has its own
# <name>.dockerignore next to it (BuildKit).
images:
	@if ! $(DOCKER) info >/dev/null 2>&1; then \
	  echo "make images: no Docker engine is reachable here ('$(DOCKER) info' fails)."; \
	  echo "On a machine with one: make images [IMAGE_REGISTRY=<registry>/<project>] [IMAGE_TAG=<tag>]"; \
	  echo "builds $(IMAGE_PREFIX)/vc-scheduler:$(IMAGE_TAG) and $(IMAGE_PREFIX)/vgpu-device-plugin:$(IMAGE_TAG)"; \
	  exit 1; \
	fi
	DOCKER_BUILDKIT=1 $(DOCKER) build -f installer/docker/vc-scheduler.Dockerfile -t $(IMAGE_PREFIX)/vc-scheduler:$(IMAGE_TAG) .
	DOCKER_BUILDKIT=1 $(DOCKER) build -f installer/docker/vgpu-device-plugin.Dockerfile -t $(IMAGE_PREFIX)/vgpu-device-plugin:$(IMAGE_TAG) .
