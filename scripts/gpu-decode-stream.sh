#!/usr/bin/env bash
# Decodes on their own stream against copy and decode on one: the build
# before (D/prev-splitzip) beside this one (D/splitzip), alternating, on a
# 12-layer mixture of experts and the 4,000-tensor size mix, plus the
# transport's CUDA tests.   scripts/gpu-decode-stream.sh D
# The change it measured was slower and was reverted (docs/PERF.md, issue 11).
set -uo pipefail
cd "$(dirname "$0")/.."
D=$1
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/decode-stream.log") 2>&1
(cd transport && "../$D/transport.test" -test.count=1 -test.run CUDA -test.v 2>&1 | grep -E "^(--- |ok|FAIL|PASS)")
"$D/splitzip" gen /tmp/m --moe 64 --layers 12 --shards 4 -q && "$D/splitzip" compress /tmp/m -o /tmp/mc --no-sync -q
"$D/splitzip" gen /tmp/x --mix 4000 --shards 4 -q && "$D/splitzip" compress /tmp/x -o /tmp/xc --no-sync -q
cat /tmp/m/* /tmp/mc/objects/*/* /tmp/x/* /tmp/xc/objects/*/* >/dev/null
for c in /tmp/mc /tmp/xc; do
  "$D/splitzip" load $c --check | grep matches
  for b in prev-splitzip splitzip; do "$D/$b" load $c --device-times | grep -E "^load|busy" | sed "s|^|$b |"; done
  for r in 1 2 3; do
    for b in prev-splitzip splitzip; do
      echo "$c $b round $r: $("$D/$b" bench load $c --rounds 1 --repeat 1 | grep compare)"
    done
  done
done
