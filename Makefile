# volcano-vgpu — `make demo` and `make test` work on a fresh machine: Go
# modules come from the module proxy, C tools from Debian packages.
SHELL := /bin/bash
.DEFAULT_GOAL := build

GO        ?= go
ROOT      := $(CURDIR)
OUT       := $(ROOT)/_output
BIN       := $(OUT)/bin
GOMODCACHE = $(shell $(GO) env GOMODCACHE)
KWOK_VERSION := v0.8.0
LDFLAGS   := -s -w
export GOFLAGS := -buildvcs=false
export KUBECONFIG := $(OUT)/local/kubeconfig

# Upstream binaries are built once and cached under _output/bin: they change
# only when the module files that pin them change.
UPSTREAM := $(BIN)/etcd $(BIN)/kube-apiserver $(BIN)/kube-controller-manager $(BIN)/kubectl $(BIN)/kwok \
            $(BIN)/vc-controller-manager $(BIN)/vc-webhook-manager $(BIN)/vcctl
# Our binaries are always handed to `go build`, whose cache makes a no-op fast.

.PHONY: build deps ours limiter upstream cluster cluster-down cluster-status demo \
        test vet unit ctest e2e bench clean help fresh-check gpu-check

help:
	@echo "make demo          build, start the local cluster, run a vGPU Volcano Job, show its GPUs"
	@echo "make test          vet + Go unit tests + C limiter tests + end-to-end tests"
	@echo "make cluster       start (or reuse) the local cluster; make cluster-down stops it"
	@echo "make bench         Go and C microbenchmarks (not part of make test)"
	@echo "make gpu-check     on a real NVIDIA GPU: memory cap and compute shares with PyTorch/CuPy/nvcc"
	@echo "make fresh-check   make demo + make test on a clean clone of HEAD in a temp dir"
	@echo "make bench-e2e     200-node benchmark against Volcano deviceshare -> docs/benchmarks.md"

build: ours upstream limiter $(OUT)/crds/.done $(OUT)/kwok-stages/.done

deps:
	$(GO) mod download
	cd e2e/tools && $(GO) mod download
	cd e2e/bench && $(GO) mod download

# A binary is replaced only when its bytes change, so `make cluster` restarts
# exactly the processes whose code changed (it compares binary and pid file times).
define gobuild
	$(GO) build -ldflags "$(LDFLAGS)" -o $(1).new $(2) && \
	  if cmp -s $(1).new $(1); then rm -f $(1).new; else mv -f $(1).new $(1); fi
endef

# The shipped binaries (cmd/), then the harness's (e2e/cmd/): the simulated
# nodes' device plugin, the kubelet emulator and the cluster driver.
ours:
	@mkdir -p $(BIN)
	$(call gobuild,$(BIN)/vc-scheduler,./cmd/vc-scheduler)
	$(call gobuild,$(BIN)/vgpu-device-plugin,./cmd/vgpu-device-plugin)
	$(call gobuild,$(BIN)/vgpu-admission,./cmd/vgpu-admission)
	$(call gobuild,$(BIN)/vgpu-cdi-hook,./cmd/vgpu-cdi-hook)
	$(call gobuild,$(BIN)/vgpu-device-plugin-sim,./e2e/cmd/vgpu-device-plugin-sim)
	$(call gobuild,$(BIN)/vgpu-device-plugin-sim-group,./e2e/cmd/vgpu-device-plugin-sim-group)
	$(call gobuild,$(BIN)/kubelet-emulator,./e2e/cmd/kubelet-emulator)
	$(call gobuild,$(BIN)/localcluster,./e2e/cmd/localcluster)

# libvcuda.so, the fake CUDA driver and the test workload (vcuda/_build).
limiter:
	$(MAKE) --no-print-directory -C vcuda all

upstream: $(UPSTREAM)

$(BIN)/etcd $(BIN)/kube-apiserver $(BIN)/kube-controller-manager $(BIN)/kubectl: e2e/tools/go.mod e2e/tools/go.sum
	@mkdir -p $(BIN)
	cd e2e/tools && $(GO) build -ldflags "$(LDFLAGS)" -o $@ ./$(notdir $@)

$(BIN)/vc-controller-manager: go.mod go.sum
	@mkdir -p $(BIN)
	$(GO) build -ldflags "$(LDFLAGS)" -o $@ volcano.sh/volcano/cmd/controller-manager

$(BIN)/vc-webhook-manager: go.mod go.sum
	@mkdir -p $(BIN)
	$(GO) build -ldflags "$(LDFLAGS)" -o $@ volcano.sh/volcano/cmd/webhook-manager

$(BIN)/vcctl: go.mod go.sum
	@mkdir -p $(BIN)
	$(GO) build -ldflags "$(LDFLAGS)" -o $@ volcano.sh/volcano/cmd/cli

$(BIN)/kwok:
	@mkdir -p $(BIN)
	GOBIN=$(BIN) GOFLAGS= $(GO) install -ldflags "$(LDFLAGS)" sigs.k8s.io/kwok/cmd/kwok@$(KWOK_VERSION)

# Volcano's CRDs and kwok's shipped stages, copied out of the module cache.
$(OUT)/crds/.done: go.mod
	@mkdir -p $(OUT)/crds
	$(GO) mod download volcano.sh/volcano
	d=$$($(GO) list -m -f '{{.Dir}}' volcano.sh/volcano) && \
	  install -m 0644 $$d/config/crd/volcano/bases/*.yaml $$d/config/crd/jobflow/bases/*.yaml $(OUT)/crds/
	@touch $@

$(OUT)/kwok-stages/.done: $(BIN)/kwok
	@mkdir -p $(OUT)/kwok-stages
	install -m 0644 $(GOMODCACHE)/sigs.k8s.io/kwok@$(KWOK_VERSION)/kustomize/stage/node/fast/node-initialize.yaml \
	  $(GOMODCACHE)/sigs.k8s.io/kwok@$(KWOK_VERSION)/kustomize/stage/pod/fast/pod-ready.yaml \
	  $(GOMODCACHE)/sigs.k8s.io/kwok@$(KWOK_VERSION)/kustomize/stage/pod/fast/pod-delete.yaml $(OUT)/kwok-stages/
	@touch $@

cluster: build
	$(BIN)/localcluster up

cluster-down:
	@if [ -x $(BIN)/localcluster ]; then $(BIN)/localcluster down; else rm -rf $(OUT)/local; fi

cluster-status:
	@$(BIN)/localcluster status

demo: cluster
	$(GO) run ./e2e/cmd/demo

# The main module, then the modules of their own under e2e/ (the control-plane
# build and the end-to-end benchmark, which alone needs the plotting library).
vet:
	$(GO) vet ./...
	$(GO) vet -tags e2e ./e2e/...
	cd e2e/tools && $(GO) vet ./...
	cd e2e/bench && $(GO) vet ./...

# Unit tests, fuzz seed corpora included (go test runs them as tests).
# The compute controller's closed-loop tests run libvcuda and the fake driver.
unit: limiter
	$(GO) test -count=1 $$($(GO) list ./... | grep -v '/device-plugin/compute$$')
	$(GO) test -count=1 -timeout 25m ./device-plugin/compute/   # real-time closed loop (minutes): not beside the others
	cd e2e/bench && $(GO) test -count=1 ./...

# The C suite in plain, ASan+UBSan and TSan builds, then the closed loop with
# the node's controller on the sanitized limiter builds.
ctest:
	$(MAKE) --no-print-directory -C vcuda test
	for b in asan tsan; do \
	  VCUDA_BUILD=$(ROOT)/vcuda/_build/$$b $(GO) test -count=1 -run 'TestClosedLoopShares/pair_30|TestClosedLoopControllerDies' ./device-plugin/compute/ || exit 1; \
	done

# End-to-end tests on their own local cluster (ports from E2E_PORT_BASE, state
# in _output/local-<base>), so they never disturb the cluster of `make cluster`
# and `make demo`, nor trip over its Jobs: reuse a running one, else start one
# for the run and stop it afterwards (VGPU_KEEP_CLUSTER=1 keeps it).
E2E_PORT_BASE ?= 24500
e2e: build
	VGPU_CLUSTER_PORT_BASE=$(E2E_PORT_BASE) $(GO) test -count=1 -tags e2e -timeout 30m ./e2e/tests/ -v -args -v=0 2>&1 | tee $(OUT)/e2e.log | grep -E '^(=== RUN|--- |PASS|FAIL|ok|panic|\s+\S+_test.go)' ; exit $${PIPESTATUS[0]}

test: vet unit installer-test ctest e2e

# README's two commands on a clean clone of HEAD in a temp dir (see the script
# for FRESH_RUNS, FRESH_LOAD, FRESH_CACHES). Not part of make test.
fresh-check:
	e2e/fresh-check.sh

# On a machine with a real NVIDIA GPU (root): libvcuda with PyTorch, CuPy and a
# CUDA C probe, whichever are installed: memory cap per path, compute shares
# under the node controller, each tenant in its own pid namespace. Prints a
# table; without a GPU it says so and exits 0. Not part of make test.
gpu-check: limiter
	$(GO) run ./cmd/vgpu-gpu-check -lib vcuda/_build/libvcuda.so

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./api/... ./plugins/... ./device-plugin/...
	$(MAKE) --no-print-directory -C vcuda bench

include installer/installer.mk
include e2e/bench/bench.mk

clean: cluster-down
	rm -rf $(OUT)
