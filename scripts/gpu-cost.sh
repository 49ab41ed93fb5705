#!/usr/bin/env bash
# The cost model on the GPU machine: `splitzip calibrate` on GPU 0, then
# checkpoints compressed with --codec fixed, entropy and cost, each cache
# loaded raw against compressed (`bench load --rounds 3`), in 2 rounds
# alternating the codecs. Checkpoints: those under RW (default /tmp/rw,
# the real-weights set or part of it) and two generated ones (20,000
# tensors of 1-64 KiB; 2,000 with the size mix of real models).
#   scripts/gpu-cost.sh D        (D holds the splitzip binary)
# Log: $OUT/cost.log; the profile: $OUT/profile.json.
set -uo pipefail
cd "$(dirname "$0")/.."
D=$1
OUT=${OUT:-/tmp/out}
RW=${RW:-/tmp/rw}
W=${WORK:-/tmp/cost}
mkdir -p "$OUT" "$W"
exec > >(tee -a "$OUT/cost.log") 2>&1
status=0
fail() { echo "FAILED: $*"; status=1; }
"$D/splitzip" calibrate --json > "$OUT/profile.json" || fail calibrate
cat "$OUT/profile.json"
"$D/splitzip" gen "$W/small" --small 20000 --shards 4 -q >/dev/null || fail gen small
"$D/splitzip" gen "$W/mix" --mix 2000 --shards 2 -q >/dev/null || fail gen mix
sets="$W/small $W/mix"
for c in "$RW"/*/; do [ -d "$c" ] && sets="$sets ${c%/}"; done
for s in $sets; do
  n=$(basename "$s")
  for codec in fixed entropy cost; do
    "$D/splitzip" compress "$s" -o "$W/$n.$codec" --codec $codec --no-sync -q > /dev/null || fail "compress $codec $n"
    "$D/splitzip" inspect "$W/$n.$codec" --json | python3 -c 'import json,sys; r=json.load(sys.stdin); t=r["totals"]; print("'"$n $codec"'", {k: t[k] for k in t if "bytes" in k or "tensors" in k})' || true
  done
  for round in 1 2; do
    for codec in fixed entropy cost; do
      echo "=== $n $codec round $round"
      "$D/splitzip" bench load "$W/$n.$codec" --rounds 3 | grep -E "^compare| run [0-9]" || fail "bench load $codec $n"
    done
  done
done
exit $status
