# End-to-end benchmark against Volcano's deviceshare (not part of make test).
# Included by the top-level Makefile; uses its GO, BIN, LDFLAGS and build.
#
#   make bench-e2e                                  3 runs per setup, rewrites docs/benchmarks.md
#   make bench-e2e BENCH_FLAGS="-runs 1 -setups vgpu,cpu-only"
#   make bench-e2e BENCH_FLAGS="-profile 30s …"     also vc-scheduler CPU profiles (_output/bench/profiles)
#
# Defaults fit a 2-core machine: 200 nodes' device plugins per process (-group),
# 8 creators paced to 200 creates/s (-workers, -qps), each create retried
# through transient failures; a failed run is reported with its reason.
BENCH_PORT_BASE ?= 27000
BENCH_FLAGS     ?=

.PHONY: bench-e2e bench-e2e-bin

# The command the report prints under "Reproduce": this invocation, with the
# cluster file when one was chosen and the flags.
BENCH_SHOWN = $(if $(filter environment command line,$(origin VGPU_SIM_FILE)),VGPU_SIM_FILE=$(VGPU_SIM_FILE) )make bench-e2e$(if $(strip $(BENCH_FLAGS)), BENCH_FLAGS="$(strip $(BENCH_FLAGS))")

# e2e/bench is a module of its own (its go.mod replaces the main module with
# this checkout).
bench-e2e-bin:
	@mkdir -p $(BIN)
	cd e2e/bench && $(GO) build -ldflags "$(LDFLAGS)" -o $(BIN)/vgpu-bench ./cmd/vgpu-bench

bench-e2e: build bench-e2e-bin
	VGPU_CLUSTER_PORT_BASE=$${VGPU_CLUSTER_PORT_BASE:-$(BENCH_PORT_BASE)} \
	VGPU_SIM_FILE=$${VGPU_SIM_FILE:-e2e/sim/clusters/bench.yaml} \
	  $(BIN)/vgpu-bench -command '$(BENCH_SHOWN)' $(BENCH_FLAGS)
