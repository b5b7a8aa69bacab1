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
#   make images           build the two images with no Docker engine (installer/imagebuild):
#                         _output/images/<name>.tar (docker-archive) and oci/<name> (OCI
#                         layout), digests in _output/images/images.txt; IMAGE_REGISTRY means
#                         what the chart's imageRegistry means. Push one with
#                           make images-push IMAGE_REGISTRY=<registry>/<project>
#   make images-test      inspect the built images (entrypoint, user, files, modes, the
#                         device plugin's loader and libraries, libvcuda.so's glibc floor)
#   make docker-images    the same two images with docker build (installer/docker)

HELM_VERSION ?= v3.19.0
HELM         := $(BIN)/helm
IMAGE_REGISTRY ?=
IMAGE_PREFIX := $(if $(IMAGE_REGISTRY),$(patsubst %/,%,$(IMAGE_REGISTRY))/)volcano-vgpu
IMAGE_TAG    ?= $(shell sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\}/\1/p' $(ROOT)/installer/helm/volcano-vgpu/Chart.yaml)
DOCKER       ?= docker

.PHONY: helm installer-test manifests images images-bin images-debs images-test images-push docker-images

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

# Images without a container engine. The binaries are built here, -trimpath,
# stripped, with an empty build ID; the device plugin (cgo) runs on Debian's
# libc6 of this machine's release, fetched with apt-get download (LIBC6_VERSION
# pins it; images-test checks every glibc symbol version the binary needs is in
# the image). Every time stamp is SOURCE_DATE_EPOCH (default 0): the same
# sources and packages give the same digests.
IMAGES_OUT        := $(OUT)/images
IMAGES_BIN        := $(IMAGES_OUT)/bin
IMAGES_DEBS       := $(IMAGES_OUT)/debs
SOURCE_DATE_EPOCH ?= 0
LIBC6_VERSION     ?=
CACERTS_VERSION   ?=
CRANE_VERSION     ?= v0.20.6
IMAGEBUILD_FLAGS  ?=
IMAGE_GOBUILD     := $(GO) build -trimpath -buildvcs=false -ldflags "-s -w -buildid="

images: images-bin images-debs
	cd installer/imagebuild && SOURCE_DATE_EPOCH=$(SOURCE_DATE_EPOCH) $(GO) run . $(IMAGEBUILD_FLAGS) \
	  -bin $(IMAGES_BIN) -prefix $(IMAGE_PREFIX) -tag $(IMAGE_TAG) -out $(IMAGES_OUT) \
	  -libc6 $(IMAGES_DEBS)/libc6.tar -libc6-version "$$(cat $(IMAGES_DEBS)/libc6.version)" \
	  -ca-certificates $(IMAGES_DEBS)/ca-certificates.tar -ca-certificates-version "$$(cat $(IMAGES_DEBS)/ca-certificates.version)"

images-bin:
	@mkdir -p $(IMAGES_BIN)
	CGO_ENABLED=0 $(IMAGE_GOBUILD) -o $(IMAGES_BIN)/vc-scheduler ./cmd/vc-scheduler
	CGO_ENABLED=0 $(IMAGE_GOBUILD) -o $(IMAGES_BIN)/vgpu-admission ./cmd/vgpu-admission
	CGO_ENABLED=0 $(IMAGE_GOBUILD) -o $(IMAGES_BIN)/vgpu-cdi-hook ./cmd/vgpu-cdi-hook
	CGO_ENABLED=1 $(IMAGE_GOBUILD) -o $(IMAGES_BIN)/vgpu-device-plugin ./cmd/vgpu-device-plugin
	$(MAKE) --no-print-directory -C vcuda _build/libvcuda.so floor
	strip --strip-debug -o $(IMAGES_BIN)/libvcuda.so vcuda/_build/libvcuda.so

# One package per directory, fetched once (apt-get download writes into the
# current directory) and again only when a pinned version differs, unpacked
# to its data tar and version.
define fetchdeb
	@mkdir -p $(IMAGES_DEBS)/$(1)
	@cd $(IMAGES_DEBS)/$(1) && \
	  if ! ls *.deb >/dev/null 2>&1 || { [ -n "$(2)" ] && [ "$$(dpkg-deb -f *.deb Version)" != "$(2)" ]; }; then \
	    rm -f *.deb; apt-get download $(1)$(if $(2),=$(2)) || \
	      { echo "make images: apt-get download $(1)$(if $(2),=$(2)) failed: run apt-get update, or set $(3) to a version apt-cache policy $(1) lists"; exit 1; }; \
	  fi && \
	  dpkg-deb --fsys-tarfile *.deb > ../$(1).tar && dpkg-deb -f *.deb Version > ../$(1).version && \
	  echo "images: $(1) $$(cat ../$(1).version)"
endef

images-debs:
	$(call fetchdeb,libc6,$(LIBC6_VERSION),LIBC6_VERSION)
	$(call fetchdeb,ca-certificates,$(CACERTS_VERSION),CACERTS_VERSION)

images-test:
	cd installer/imagebuild && VGPU_IMAGES=$(IMAGES_OUT) $(GO) test -count=1 ./...

# Pushes both tarballs to $(IMAGE_PREFIX) with crane (go-containerregistry's
# CLI, from the module proxy); credentials from ~/.docker/config.json
# (crane auth login, docker login).
images-push:
	@[ -n "$(IMAGE_REGISTRY)" ] || { echo "make images-push: set IMAGE_REGISTRY=<registry>/<project> (and IMAGE_TAG)"; exit 1; }
	for n in vc-scheduler vgpu-device-plugin; do \
	  GOFLAGS= $(GO) run github.com/google/go-containerregistry/cmd/crane@$(CRANE_VERSION) push $(IMAGES_OUT)/$$n.tar $(IMAGE_PREFIX)/$$n:$(IMAGE_TAG) || exit 1; \
	done

# With a Docker engine: the same content from installer/docker. The build
# context is the repository root; each Dockerfile has its own
# <name>.dockerignore next to it (BuildKit).
docker-images:
	@if ! $(DOCKER) info >/dev/null 2>&1; then \
	  echo "make docker-images: no Docker engine is reachable here ('$(DOCKER) info' fails); make images needs none."; \
	  exit 1; \
	fi
	DOCKER_BUILDKIT=1 $(DOCKER) build -f installer/docker/vc-scheduler.Dockerfile -t $(IMAGE_PREFIX)/vc-scheduler:$(IMAGE_TAG) .
	DOCKER_BUILDKIT=1 $(DOCKER) build -f installer/docker/vgpu-device-plugin.Dockerfile -t $(IMAGE_PREFIX)/vgpu-device-plugin:$(IMAGE_TAG) .
