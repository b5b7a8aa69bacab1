#!/usr/bin/env bash
# fresh-check: README's two commands, as a new user runs them, on a clean clone
# of the committed HEAD in a temp dir: `make demo`, then `make test`.
#
#   FRESH_RUNS=N        repeat the whole check N times (default 1), stop at the first failure
#   FRESH_CACHES=1      also start from empty Go build and module caches (slow: a cold build)
#   FRESH_KEEP=1        keep the clone (its path is printed) instead of removing it
#   FRESH_LOAD=N        run N busy loops beside the check (CPU pressure), default 0
#
# Uncommitted changes are not part of the check: commit first.
set -euo pipefail
src=$(git -C "$(dirname "$0")/.." rev-parse --show-toplevel)
runs=${FRESH_RUNS:-1}
load=${FRESH_LOAD:-0}
if [ -n "$(git -C "$src" status --porcelain --untracked-files=no)" ]; then
	echo "fresh-check: uncommitted changes in $src are not checked (only HEAD $(git -C "$src" rev-parse --short HEAD) is)" >&2
fi
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT
for _ in $(seq 1 "$load"); do (while :; do :; done) & pids+=($!); done

pass=0
for i in $(seq 1 "$runs"); do
	dir=$(mktemp -d "${TMPDIR:-/tmp}/vgpu-fresh.XXXXXX")
	git clone -q "$src" "$dir/repo"
	# A sibling shared/ (design notes) comes along when there is one, as in CI.
	[ -d "$src/../shared" ] && cp -a "$src/../shared" "$dir/shared"
	env=()
	if [ "${FRESH_CACHES:-0}" = 1 ]; then
		env+=(GOCACHE="$dir/gocache" GOMODCACHE="$dir/gomodcache")
	fi
	log="$dir/fresh-check.log"
	echo "fresh-check run $i/$runs: clone of $(git -C "$src" rev-parse --short HEAD) in $dir/repo (log: $log, load: $load busy loops)"
	start=$(date +%s)
	ok=1
	(cd "$dir/repo" && env "${env[@]}" make demo && make cluster-down && env "${env[@]}" make test) >"$log" 2>&1 || ok=0
	(cd "$dir/repo" && make cluster-down >/dev/null 2>&1) || true
	secs=$(( $(date +%s) - start ))
	if [ "$ok" = 0 ]; then
		echo "fresh-check run $i: FAILED after ${secs}s; last lines of $log:"
		tail -40 "$log"
		echo "fresh-check: $pass passed, 1 failed"
		exit 1
	fi
	pass=$((pass + 1))
	echo "fresh-check run $i: passed in ${secs}s"
	if [ "${FRESH_KEEP:-0}" != 1 ]; then
		chmod -R u+w "$dir" 2>/dev/null || true
		rm -rf "$dir"
	fi
done
echo "fresh-check: $pass passed, 0 failed"
