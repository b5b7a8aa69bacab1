#!/bin/sh
# Runs vctest in each build dir given, then prints the total. Exit 1 if anything failed.
total_p=0; total_f=0; status=0
for d in "$@"; do
	echo "=== $d/vctest"
	out=$("$d/vctest" 2>&1); rc=$?
	printf '%s\n' "$out"
	line=$(printf '%s\n' "$out" | grep -E '^[0-9]+ passed, [0-9]+ failed$' | tail -1)
	p=$(echo "$line" | awk '{print $1}'); f=$(echo "$line" | awk '{print $3}')
	if [ -z "$line" ]; then p=0; f=1; echo "$d/vctest ended without a summary (exit $rc)"; fi
	[ "$rc" -ne 0 ] && [ "$f" -eq 0 ] && f=1
	[ "$f" -ne 0 ] && status=1
	total_p=$((total_p + p)); total_f=$((total_f + f))
done
echo "=== all builds ($*)"
echo "$total_p passed, $total_f failed"
exit $status
