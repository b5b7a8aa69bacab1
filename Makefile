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
        test vet unit ctest e2e bench clean help fresh-check gpu-check gpu-bundle gpu-bundle-smoke gpu-bundle-rehearsal

help:
	@echo "make demo          build, start the local cluster, run a vGPU Volcano Job, show its GPUs"
	@echo "make test          vet + Go unit tests + C limiter tests + end-to-end tests"
	@echo "make cluster       start (or reuse) the local cluster; make cluster-down stops it"
	@echo "make bench         Go and C microbenchmarks (not part of make test)"
	@echo "make gpu-check     on a real NVIDIA GPU: memory cap and compute shares with PyTorch/CuPy/nvcc"
	@echo "make gpu-bundle    _output/gpu-bundle/: the same check as a folder for GPU machines without Go (./run.sh)"
	@echo "make gpu-bundle-rehearsal  the bundle's share rows on the fake driver behaving as an H200 (~2.5 min; REHEARSAL_GPU=h100: as an H100)"
	@echo "make fresh-check   make demo + make test on a clean clone of HEAD in a temp dir"
	@echo "make bench-e2e     200-node benchmark against Volcano deviceshare -> docs/benchmarks.md"

build: ours upstream limiter $(OUT)/crds/.done $(OUT)/kwok-stages/.done

deps:
	$(GO) mod download
	cd e2e/tools && $(GO) mod download
	cd e2e/bench && $(GO) mod download
	cd installer/imagebuild && $(GO) mod download
	cd installer/promcheck && $(GO) mod download

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
	$(call gobuild,$(BIN)/kubectl-vgpu,./cmd/kubectl-vgpu)
	$(call gobuild,$(BIN)/vgpu-device-plugin-sim,./e2e/cmd/vgpu-device-plugin-sim)
	$(call gobuild,$(BIN)/vgpu-device-plugin-sim-group,./e2e/cmd/vgpu-device-plugin-sim-group)
	$(call gobuild,$(BIN)/kubelet-emulator,./e2e/cmd/kubelet-emulator)
	$(call gobuild,$(BIN)/localcluster,./e2e/cmd/localcluster)
	$(call gobuild,$(BIN)/fake-mps-control,./e2e/cmd/fake-mps-control)

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
	cd installer/imagebuild && $(GO) vet ./...
	cd installer/promcheck && $(GO) vet ./...

# Unit tests, fuzz seed corpora included (go test runs them as tests).
# The compute controller's closed-loop tests run libvcuda and the fake driver.
unit: limiter
	$(GO) test -count=1 $$($(GO) list ./... | grep -v '/device-plugin/compute$$')
	$(GO) test -count=1 -timeout 25m ./device-plugin/compute/   # real-time closed loop (minutes): not beside the others
	cd e2e/bench && $(GO) test -count=1 ./...
	cd installer/imagebuild && $(GO) test -count=1 ./...   # image inspection skips: make images-test
	cd installer/promcheck && $(GO) test -count=1 ./...    # alert rules and dashboard vs the exported series

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

test: vet unit installer-test ctest gpu-bundle-smoke e2e

# README's two commands on a clean clone of HEAD in a temp dir (see the script
# for FRESH_RUNS, FRESH_LOAD, FRESH_CACHES). Not part of make test.
fresh-check:
	e2e/fresh-check.sh

# On a machine with a real NVIDIA GPU (root): libvcuda with PyTorch, CuPy and a
# CUDA C probe, whichever are installed: memory cap per path, compute shares
# under the node controller, each tenant in its own pid namespace. Prints a
# table; without a GPU it says so and exits 0. Not part of make test.
gpu-check: limiter
	$(GO) run ./cmd/vgpu-gpu-check -lib vcuda/_build/libvcuda.so $(GPU_CHECK_FLAGS)

# The gpu bundle: everything the check needs on a GPU machine with no Go and no network, in one
# folder (copy it, run ./run.sh as root). The binary is built with cgo (go-nvml dlopens
# libnvidia-ml), so it is dynamically linked; on x86_64 it needs no glibc newer than 2.28 (pins in
# cmd/vgpu-gpu-check/bundle/glibc_floor.h, its own start file in start_gpubundle.go), elsewhere
# 2.34. libvcuda.so keeps its own floor (make -C vcuda floor). -trimpath and stripped debug info:
# no path of this machine ships. netgo/osusergo: the check resolves no names and looks up no users,
# but apimachinery's wait pulls in net, whose cgo resolver needs res_search@GLIBC_2.34.
# make test runs gpu-bundle-smoke, so a bundle that does not build or run fails there, not on a draw.
GPU_BUNDLE := $(OUT)/gpu-bundle
ifeq ($(shell $(GO) env GOARCH),amd64)
GPU_CHECK_GLIBC_FLOOR := 2.28
# (the header's hash in the flags: go's build cache does not see a forced-in header change)
GPU_CHECK_FLOOR_H := $(ROOT)/cmd/vgpu-gpu-check/bundle/glibc_floor.h
GPU_CHECK_BUILD := CGO_CFLAGS="-O2 -include $(GPU_CHECK_FLOOR_H) -DGC_FLOOR_H_SUM=$$(cksum < $(GPU_CHECK_FLOOR_H) | cut -d' ' -f1)" \
	$(GO) build -tags gpubundle,netgo,osusergo -trimpath \
	-ldflags "$(LDFLAGS) -extldflags '-nostartfiles -Wl,--no-as-needed -l:libpthread.so.0 -l:libdl.so.2'"
else
GPU_CHECK_GLIBC_FLOOR := 2.34
GPU_CHECK_BUILD := $(GO) build -trimpath -ldflags "$(LDFLAGS)"
endif
gpu-bundle: limiter
	rm -rf $(GPU_BUNDLE) && mkdir -p $(GPU_BUNDLE)/programs
	CGO_ENABLED=1 $(GPU_CHECK_BUILD) -o $(GPU_BUNDLE)/vgpu-gpu-check ./cmd/vgpu-gpu-check
	sh vcuda/tests/glibc_floor.sh $(GPU_BUNDLE)/vgpu-gpu-check $(GPU_CHECK_GLIBC_FLOOR)
	$(MAKE) --no-print-directory -C vcuda floor
	strip --strip-debug -o $(GPU_BUNDLE)/libvcuda.so vcuda/_build/libvcuda.so
	cp cmd/vgpu-gpu-check/programs/torch_check.py cmd/vgpu-gpu-check/programs/cupy_check.py cmd/vgpu-gpu-check/programs/vgpu_start.py \
		cmd/vgpu-gpu-check/programs/probe.cu cmd/vgpu-gpu-check/programs/slicing.cu $(GPU_BUNDLE)/programs/
	cp cmd/vgpu-gpu-check/bundle/run.sh $(GPU_BUNDLE)/run.sh && chmod +x $(GPU_BUNDLE)/run.sh
	@if grep -rl -e '$(ROOT)' -e '$(GOMODCACHE)' $(GPU_BUNDLE); then \
		echo "gpu-bundle: the files above name paths of this machine; build with -trimpath and strip debug info"; exit 1; fi
	@echo "gpu-bundle: $(GPU_BUNDLE) $$(du -sk $(GPU_BUNDLE) | cut -f1) KiB (limit 64 MiB): copy it to the GPU machine, run ./run.sh as root"

# The bundle as built runs here: run.sh says there is no GPU and exits 0; then its binary runs
# memory, memory guard and share rows on the project's fake driver (vcuda's workload standing in for PyTorch,
# cmd/vgpu-gpu-check/testdata/fake), which exercises dlopen, the namespaces and the controller;
# then the mps rows with the fake MPS control daemon (e2e/cmd/fake-mps-control). Where nvcc is
# installed (no GPU needed) it first compiles the CUDA C programs as run.sh does, warnings as
# errors, so a program that would not build on the GPU machine fails here.
gpu-bundle-smoke: gpu-bundle
	@if command -v nvcc >/dev/null 2>&1; then nv=$$(mktemp -d); trap 'rm -rf $$nv' EXIT; \
	  for p in probe slicing; do \
	    nvcc -O2 -Werror all-warnings -Xcompiler -Wall,-Wextra,-Werror -o $$nv/$$p $(GPU_BUNDLE)/programs/$$p.cu -lcuda || \
	      { echo "gpu-bundle-smoke: nvcc could not build programs/$$p.cu (run.sh builds it on the GPU machine)"; exit 1; }; \
	  done; echo "gpu-bundle-smoke: nvcc $$(nvcc --version | sed -n "s/.*release \([0-9.]*\).*/\1/p"): probe.cu and slicing.cu build"; \
	 else echo "gpu-bundle-smoke: nvcc not found: the CUDA C programs are built on the GPU machine only (Debian: nvidia-cuda-toolkit, non-free)"; fi
	@out=$$(cd $(GPU_BUNDLE) && ./run.sh 2>&1); rc=$$?; echo "$$out"; \
	 [ $$rc -eq 0 ] || { echo "gpu-bundle-smoke: run.sh exited $$rc, want 0"; exit 1; }; \
	 echo "$$out" | grep -q '^gpu-check: no NVIDIA GPU here' || \
		{ echo "gpu-bundle-smoke: the bundle's vgpu-gpu-check did not say there is no GPU"; exit 1; }
	@fk=$$(mktemp -d); trap 'rm -rf $$fk' EXIT; \
	 out=$$(LD_LIBRARY_PATH=$(ROOT)/vcuda/_build/fake FAKEGPU_DIR=$$fk \
		FAKEGPU_DEVICES=GPU-8b1c0d2e-0000-4000-8000-000000000001:8192 FAKE_WORKLOAD=$(ROOT)/vcuda/_build/workload \
		$(GPU_BUNDLE)/vgpu-gpu-check -lib $(GPU_BUNDLE)/libvcuda.so -programs $(ROOT)/cmd/vgpu-gpu-check/testdata/fake \
		-probe $(ROOT)/cmd/vgpu-gpu-check/testdata/fake/probe -use pytorch,probe -only memory,guard,pair -seconds 2 \
		-cap-mib 2048 -deadline 2m -work $$fk 2>&1); rc=$$?; echo "$$out"; \
	 [ $$rc -eq 0 ] && echo "$$out" | grep -q '^# 14 rows: ' && echo "$$out" | grep -qE '^guard +memory guard.* ok ' && \
	 ! echo "$$out" | grep -qE 'ERROR|TIMEOUT|OVER THE CAP|skipped' || \
		{ echo "gpu-bundle-smoke: the bundle's binary failed on the fake driver (exit $$rc)"; exit 1; }
	@fk=$$(mktemp -d); trap 'rm -rf $$fk' EXIT; \
	 $(GO) build -o $$fk/nvidia-cuda-mps-control ./e2e/cmd/fake-mps-control && \
	 out=$$(LD_LIBRARY_PATH=$(ROOT)/vcuda/_build/fake FAKEGPU_DIR=$$fk \
		FAKEGPU_DEVICES=GPU-8b1c0d2e-0000-4000-8000-000000000001:8192 FAKE_WORKLOAD=$(ROOT)/vcuda/_build/workload \
		$(GPU_BUNDLE)/vgpu-gpu-check -lib $(GPU_BUNDLE)/libvcuda.so -programs $(ROOT)/cmd/vgpu-gpu-check/testdata/fake \
		-probe $(ROOT)/cmd/vgpu-gpu-check/testdata/fake/probe -use pytorch,probe -only mps -seconds 2 \
		-cap-mib 2048 -deadline 2m -work $$fk -mps-control $$fk/nvidia-cuda-mps-control 2>&1); rc=$$?; echo "$$out"; \
	 [ $$rc -eq 0 ] && echo "$$out" | grep -q '^# 6 rows: ' && ! echo "$$out" | grep -qE 'ERROR|TIMEOUT|OVER THE CAP|skipped|stopping the MPS' || \
		{ echo "gpu-bundle-smoke: the bundle's mps rows failed on the fake driver and the fake MPS control daemon (exit $$rc)"; exit 1; }

# A rehearsal of a GPU draw: the bundle's binary runs every share row (single, pair, mixed,
# triple, balance; 10 s tenants, ~2.5 min) and the slicing rows on the fake driver behaving as the H200 did (one
# per-process sample a round reading the whole device, device samples every 200 ms) and
# time-slicing contexts (2.1 ms slices, 155 us switches: two unlimited tenants get 46 + 46% of
# their solo rates, as two on the H200 got 45.9 + 45.9), its clock following power (kernels up
# to 1.36x faster below 62% of a GEMM's full draw, as the H200 clocked 1980 MHz there and 1455
# at 700 W); the fake stand-ins run PyTorch's matmul loop and the probe's elementwise loop as
# the H200 did (what they draw, how often they synchronize), PyTorch's setting up for 3 s as it
# imports. Its table (also in _output/gpu-bundle-rehearsal.txt, the
# controller's log beside it) says what the check would report before GPU time is spent
# (not part of make test: a machine's load moves its figures).
# REHEARSAL_ONLY: its row groups (e.g. deep); REHEARSAL_FLAGS: more of the check's flags (-unconfined).
# REHEARSAL_GPU=h100: the fake behaving as the H100 did instead (REALGPU.md: device samples every
# 100 ms, one per-process sample a second per process off by up to 20 points, 2 ms slices with
# 40 us switches: two unlimited tenants 49 + 49% of solo; no power-capped clock).
REHEARSAL_ONLY ?= single,pair,slicing,mixed,triple,balance
REHEARSAL_FLAGS ?=
REHEARSAL_GPU ?= h200
REHEARSAL_ENV_h200 := FAKEGPU_PROC_WHOLE=1 FAKEGPU_SAMPLE_US=200000 FAKEGPU_PROC_SAMPLE_US=200000 \
	FAKEGPU_SLICE_US=2100 FAKEGPU_SWITCH_US=155 FAKEGPU_BOOST=0.36 FAKEGPU_BOOST_KNEE=62 FAKEGPU_CLOCK_MHZ=1455 FAKE_AS_H200=1
REHEARSAL_ENV_h100 := FAKEGPU_SAMPLE_US=100000 FAKEGPU_PROC_SAMPLE_US=1000000 FAKEGPU_PROC_NOISE=20 \
	FAKEGPU_SLICE_US=2000 FAKEGPU_SWITCH_US=40
gpu-bundle-rehearsal: gpu-bundle
	@case "$(REHEARSAL_GPU)" in h100|h200) ;; *) echo "REHEARSAL_GPU=$(REHEARSAL_GPU): not a GPU the fake can behave as; use h200 (the default) or h100"; exit 2;; esac; \
	 fk=$$(mktemp -d); trap 'rm -rf $$fk' EXIT; \
	 LD_LIBRARY_PATH=$(ROOT)/vcuda/_build/fake FAKEGPU_DIR=$$fk \
		FAKEGPU_DEVICES=GPU-8b1c0d2e-0000-4000-8000-000000000001:8192 FAKE_WORKLOAD=$(ROOT)/vcuda/_build/workload \
		$(REHEARSAL_ENV_$(REHEARSAL_GPU)) FAKE_IMPORT_SECS=3 \
		$(GPU_BUNDLE)/vgpu-gpu-check -lib $(GPU_BUNDLE)/libvcuda.so -programs $(ROOT)/cmd/vgpu-gpu-check/testdata/fake \
		-probe $(ROOT)/cmd/vgpu-gpu-check/testdata/fake/probe -slicing $(ROOT)/cmd/vgpu-gpu-check/testdata/fake/slicing \
		-use pytorch,probe -only $(REHEARSAL_ONLY) $(REHEARSAL_FLAGS) \
		-seconds 10 -cap-mib 2048 -deadline 6m -work $$fk -out $(OUT)/gpu-bundle-rehearsal.txt -trace $(OUT)/gpu-bundle-rehearsal.trace \
		2>$(OUT)/gpu-bundle-rehearsal.log

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./api/... ./plugins/... ./device-plugin/...
	$(MAKE) --no-print-directory -C vcuda bench

include installer/installer.mk
include e2e/bench/bench.mk

clean: cluster-down
	rm -rf $(OUT)
