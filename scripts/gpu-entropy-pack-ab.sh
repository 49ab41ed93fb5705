#!/usr/bin/env bash
# Entropy payloads packed up to 256 KiB (D/splitzip) against up to the
# packing threshold (D/splitzip-e2m, a build with
# transport.PackedEntropyBytes = MaxSmallBytes), on the real weights in RW:
# each build compresses its own entropy cache, then ROUNDS (default 6)
# rounds alternate `bench load --rounds 3` of the two, and each build's
# face-api load is profiled once (scripts/gpu-load-profile.sh). Logs in
# $OUT.
#   RW=DIR scripts/gpu-entropy-pack-ab.sh D
set -uo pipefail
cd "$(dirname "$0")/.."
D=$1
OUT=${OUT:-/tmp/out}
RW=${RW:-/tmp/rw}
mkdir -p "$OUT"
for c in "$RW"/*/; do
	c=$(basename "$c")
	for b in splitzip splitzip-e2m; do
		rm -rf "/tmp/pab.$b.$c"
		"$D/$b" compress "$RW/$c" -o "/tmp/pab.$b.$c" --codec entropy --no-sync -q >/dev/null || echo "FAILED: $b compress $c"
	done
	for r in $(seq 1 "${ROUNDS:-6}"); do
		for b in splitzip splitzip-e2m; do
			echo "$c $b round $r: $("$D/$b" bench load "/tmp/pab.$b.$c" --rounds 3 | grep compare)"
		done
	done
done 2>&1 | tee "$OUT/entropy-pack-ab.log"
for b in splitzip splitzip-e2m; do
	echo "== $b"
	BIN=$b CODECS=entropy REPEAT=30 OUT=$OUT/p-$b bash scripts/gpu-load-profile.sh "$D" "$RW/face-api" 2>&1 | grep -E "runs"
done
