#!/bin/sh
# run.sh - the gpu bundle's entry point (make gpu-bundle builds the folder).
# Run as root on a machine with an NVIDIA GPU; needs no Go and no network.
# It builds the CUDA C probe with nvcc when nvcc is present, then runs
# vgpu-gpu-check under a total deadline and writes its table to stdout and to
# a file (default: $OUT/ when $OUT is set, else this folder). Without a GPU it
# says so and exits 0. (GPU_CHECK_ASSUME_GPU=1 skips that test: the check's own
# tests run this script on the project's fake driver.) GPU_CHECK_SKIP=LIST
# leaves row groups out as --skip does (GPU_CHECK_SKIP=mps: no MPS daemon).
# The mps rows start their own nvidia-cuda-mps-control daemon in a temp dir and
# stop it; they never change the GPU's compute mode.
set -u
DIR=$(cd "$(dirname "$0")" && pwd)

usage() {
	cat <<'USAGE'
usage: ./run.sh [flags]
  --deadline D          total deadline, seconds or with s/m (default 7m40s); rows that no longer fit are skipped
  --scenario-timeout D  timeout of one row (default 60s); a row cut by it reads TIMEOUT
  --only LIST           row groups: context,memory,guard,single,pair,slicing,mixed,triple,balance,mps,deep
                        (default all but deep)
  --skip LIST           row groups to leave out (default $GPU_CHECK_SKIP, e.g. mps)
  --mps-control CMD     nvidia-cuda-mps-control of the mps rows (default: the one in PATH)
  --use LIST            programs: pytorch,cupy,probe (default all found)
  --share-program P     program of the single/pair/triple/balance rows (default pytorch)
  --seconds N           how long each share tenant runs (default 10)
  --cap-mib N           memory cap of the memory rows (default 8192)
  --out FILE            table file (default $OUT/gpu-check-<date>.txt, else ./gpu-check-<date>.txt here);
                        each share row's controller periods (a .tsv per row) and the slicing rows' kernel
                        intervals go to FILE's name with .trace.tar.gz
  --unconfined          the share rows' controller with limiter.confineSlots: false (launch slots that do not
                        confine, the fallback): run the share rows once with and once without it to compare
  --plan                print the selected rows and the time planned for each, run nothing
  -h, --help            this text
USAGE
}

# secs D: D in seconds ("90", "90s", "6m").
secs() {
	case "$1" in
	*m) n=${1%m}; mult=60 ;;
	*s) n=${1%s}; mult=1 ;;
	*) n=$1; mult=1 ;;
	esac
	case "$n" in
	'' | *[!0-9]*) echo "run.sh: $2 $1: use whole seconds or minutes (90, 90s, 6m)" >&2; exit 2 ;;
	esac
	echo $((n * mult))
}

deadline=460 timeout=60 only= skip=${GPU_CHECK_SKIP:-} mpsctl= use= share= seconds= cap= out= plan= unconfined=
while [ $# -gt 0 ]; do
	case "$1" in
	-h | --help) usage; exit 0 ;;
	--plan) plan=1; shift; continue ;;
	--unconfined) unconfined=1; shift; continue ;;
	--*=*) flag=${1%%=*} val=${1#*=}; shift; set -- "$flag" "$val" "$@"; continue ;;
	esac
	[ $# -ge 2 ] || { echo "run.sh: $1 needs a value" >&2; usage >&2; exit 2; }
	case "$1" in
	--deadline) deadline=$(secs "$2" "$1") || exit 2 ;;
	--scenario-timeout) timeout=$(secs "$2" "$1") || exit 2 ;;
	--only) only=$2 ;;
	--skip) skip=$2 ;;
	--mps-control) mpsctl=$2 ;;
	--use) use=$2 ;;
	--share-program) share=$2 ;;
	--seconds) seconds=$2 ;;
	--cap-mib) cap=$2 ;;
	--out) out=$2 ;;
	*) echo "run.sh: unknown flag $1" >&2; usage >&2; exit 2 ;;
	esac
	shift 2
done

if [ -n "$plan" ]; then
	set -- -plan -deadline "${deadline}s" -scenario-timeout "${timeout}s"
	[ -n "$only" ] && set -- "$@" -only "$only"
	[ -n "$skip" ] && set -- "$@" -skip "$skip"
	[ -n "$use" ] && set -- "$@" -use "$use"
	[ -n "$share" ] && set -- "$@" -share-program "$share"
	[ -n "$seconds" ] && set -- "$@" -seconds "$seconds"
	exec "$DIR/vgpu-gpu-check" "$@"
fi
if [ "${GPU_CHECK_ASSUME_GPU:-}" != 1 ] && ! ls /dev/nvidia[0-9]* >/dev/null 2>&1 &&
	! nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then
	echo "run.sh: no NVIDIA GPU here (no /dev/nvidia0; nvidia-smi lists none); nothing to check. Run it on a GPU node."
	# The check itself confirms it through NVML (and that it loads on this machine's glibc).
	exec "$DIR/vgpu-gpu-check" -lib "$DIR/libvcuda.so" -programs "$DIR/programs" -deadline 30s
fi
if [ "$(id -u)" != 0 ]; then
	echo "run.sh: needs root: each tenant gets its own pid and mount namespace (unshare, mount); run: sudo $0" >&2
	exit 1
fi
for tool in unshare mount timeout; do
	command -v $tool >/dev/null 2>&1 || { echo "run.sh: $tool not found: install util-linux / coreutils" >&2; exit 1; }
done

start=$(date +%s)
stamp=$(date -u +%Y%m%dT%H%M%SZ)
if [ -z "$out" ]; then
	if [ -n "${OUT:-}" ]; then out=$OUT/gpu-check-$stamp.txt; else out=$DIR/gpu-check-$stamp.txt; fi
fi
mkdir -p "$(dirname "$out")" || exit 1
work=$(mktemp -d "${TMPDIR:-/tmp}/vgpu-gpu-check.XXXXXX") || exit 1
nvidia-smi >"${out%.txt}.nvidia-smi.txt" 2>&1 || true

# The probe runs in the context, memory, mixed and mps rows, and in every share row with --share-program probe;
# the slicing program (slicing.cu) in the slicing rows. Both build at once, each on its own: a
# failed build skips only its rows.
probe=off slicing=off
# built NAME: whether NAME.cu was built (and, where its build failed, why)
built() {
	[ -f "$work/nvcc-$1.rc" ] || return 1
	[ "$(cat "$work/nvcc-$1.rc")" = 0 ] && return 0
	echo "run.sh: nvcc $1.cu failed (its rows will read skipped):" >&2
	tail -n 5 "$work/nvcc-$1.log" >&2
	return 1
}
need=no
case ",${only:-context}," in *,context,* | *,memory,* | *,mixed,* | *,mps,*) need=yes ;; esac
[ "$share" = probe ] && need=yes
case ",${use:-probe},$need" in *,probe,*yes) ;; *) need=no ;; esac
needslicing=no
case ",${only:-slicing}," in *,slicing,*) needslicing=yes ;; esac
case ",$skip," in *,slicing,*) needslicing=no ;; esac
if [ $need = yes ] || [ $needslicing = yes ]; then
	if command -v nvcc >/dev/null 2>&1; then
		echo "run.sh: building the CUDA C programs with $(command -v nvcc)"
		[ $need = yes ] && { timeout 150 nvcc -O2 -o "$work/probe" "$DIR/programs/probe.cu" -lcuda >"$work/nvcc-probe.log" 2>&1; echo $? >"$work/nvcc-probe.rc"; } &
		[ $needslicing = yes ] && { timeout 150 nvcc -O2 -o "$work/slicing" "$DIR/programs/slicing.cu" >"$work/nvcc-slicing.log" 2>&1; echo $? >"$work/nvcc-slicing.rc"; } &
		wait
		built probe && probe=$work/probe
		built slicing && slicing=$work/slicing
	else
		echo "run.sh: nvcc not found: the probe's and the slicing rows will read skipped" >&2
	fi
fi

left=$((deadline - ($(date +%s) - start) - 5))
if [ $left -lt 30 ]; then
	echo "run.sh: only ${left}s of --deadline ${deadline}s left after building the probe: raise --deadline" >&2
	exit 1
fi
set -- -lib "$DIR/libvcuda.so" -programs "$DIR/programs" -probe "$probe" -slicing "$slicing" -work "$work" -out "$out" \
	-trace "${out%.txt}.trace" -deadline "${left}s" -scenario-timeout "${timeout}s"
[ -n "$only" ] && set -- "$@" -only "$only"
[ -n "$skip" ] && set -- "$@" -skip "$skip"
[ -n "$mpsctl" ] && set -- "$@" -mps-control "$mpsctl"
[ -n "$use" ] && set -- "$@" -use "$use"
[ -n "$share" ] && set -- "$@" -share-program "$share"
[ -n "$seconds" ] && set -- "$@" -seconds "$seconds"
[ -n "$cap" ] && set -- "$@" -cap-mib "$cap"
[ -n "$unconfined" ] && set -- "$@" -unconfined
# A hard stop a little after the check's own deadline, in case a tenant ignores it.
timeout -k 10 $((left + 20)) "$DIR/vgpu-gpu-check" "$@"
rc=$?
case $rc in
0) echo "run.sh: table written to $out" ;;
124 | 137) echo "run.sh: vgpu-gpu-check overran its deadline and was stopped; the rows it finished are in $out" >&2 ;;
*) echo "run.sh: vgpu-gpu-check failed (exit $rc)" >&2 ;;
esac
# The traces as one file: a lent machine sends back a few files only.
trace=${out%.txt}.trace
if [ -d "$trace" ] && tar -czf "$trace.tar.gz" -C "$(dirname "$trace")" "$(basename "$trace")" 2>/dev/null; then
	rm -rf "$trace"
	echo "run.sh: row traces in $trace.tar.gz"
fi
rm -rf "$work"
exit $rc
