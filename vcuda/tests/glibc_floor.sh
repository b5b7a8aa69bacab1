#!/bin/sh
# glibc_floor.sh LIB FLOOR
# Fails, naming the symbols, when LIB needs a glibc symbol version newer than FLOOR (e.g. 2.28),
# or uses pthread_* / dl* functions without listing libpthread.so.0 / libdl.so.2 as needed
# libraries (before glibc 2.34 those functions live there, not in libc.so.6).
# glibc_floor.sh --selftest LIB: the check must refuse LIB against floor 2.3 (it cannot pass).
set -u
if [ "${1:-}" = "--selftest" ]; then
	out=$(sh "$0" "$2" 2.3 2>&1) && { echo "glibc_floor.sh selftest: $2 passed floor 2.3; the check cannot fail"; exit 1; }
	echo "$out" | grep -q 'clock_gettime@GLIBC_2.17' || { echo "glibc_floor.sh selftest: the refusal does not name clock_gettime@GLIBC_2.17:"; echo "$out"; exit 1; }
	echo "glibc floor check: refuses $2 against 2.3 as it should"
	exit 0
fi
lib=$1 floor=$2
command -v objdump >/dev/null 2>&1 || { echo "glibc_floor.sh: objdump not found: install binutils"; exit 1; }
syms=$(objdump -T "$lib") || exit 1
newer=$(printf '%s\n' "$syms" | awk -v floor="$floor" '
	function newer(a, b,   x, y, k) {
		split(a, x, "."); split(b, y, ".")
		for (k = 1; k <= 3; k++) {
			if (x[k] + 0 > y[k] + 0) return 1
			if (x[k] + 0 < y[k] + 0) return 0
		}
		return 0
	}
	{
		for (i = 1; i < NF; i++) {
			v = $i; gsub(/[()]/, "", v)
			if (v ~ /^GLIBC_[0-9]+\.[0-9]+(\.[0-9]+)?$/) {
				sub(/^GLIBC_/, "", v)
				if (newer(v, floor)) print "  " $NF "@GLIBC_" v
			}
		}
	}' | sort -u)
status=0
if [ -n "$newer" ]; then
	echo "$lib needs glibc symbol versions newer than its floor $floor:"
	echo "$newer"
	echo "pin them in src/glibc_floor.h to a version every glibc >= $floor has, or avoid the function"
	status=1
fi
needed=$(objdump -p "$lib" | awk '$1 == "NEEDED" {print $2}')
# From glibc 2.34 on libc.so.6 holds the pthread and dl functions: only a lower floor needs the two.
pairs="pthread_:libpthread.so.0 dl:libdl.so.2"
if printf '%s\n2.33\n' "$floor" | sort -V -C; then :; else pairs=; fi
for pair in $pairs; do
	prefix=${pair%%:*} want=${pair#*:}
	used=$(printf '%s\n' "$syms" | awk -v p="$prefix" '/\*UND\*/ && index($NF, p) == 1 {print $NF}' | sort -u | tr '\n' ' ')
	if [ -n "$used" ] && ! printf '%s\n' "$needed" | grep -qx "$want"; then
		echo "$lib uses $used but does not need $want: on glibc < 2.34 they are not found (link it with --no-as-needed)"
		status=1
	fi
done
[ $status -eq 0 ] && echo "glibc floor check: $lib needs glibc <= $floor ($(printf '%s\n' "$needed" | tr '\n' ' '))"
exit $status
