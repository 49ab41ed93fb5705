#!/usr/bin/env bash
# Many small tensors, the 2026-11-29 build (D/base-splitzip) beside this
# one (D/splitzip), alternating: bench load of 20,000 tensors of 1-64 KiB
# with each build's defaults, and host microseconds per tensor (wall time
# of a first load over the tensor count). Each build loads a cache it
# compressed (a baseline may not read this build's index version).
#   scripts/gpu-small-tensors-ab.sh D
set -uo pipefail
D=$1
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/small-tensors-ab.log") 2>&1
"$D/splitzip" gen /tmp/sm --small 20000 --shards 4 -q || exit 1
for b in base-splitzip splitzip; do
  rm -rf /tmp/smc.$b && "$D/$b" compress /tmp/sm -o /tmp/smc.$b --no-sync -q || exit 1
done
cat /tmp/sm/* /tmp/smc.*/objects/*/* >/dev/null
for r in 1 2 3; do
  for b in base-splitzip splitzip; do
    echo "$b round $r: $("$D/$b" bench load /tmp/smc.$b --rounds 1 --repeat 1 | grep compare)"
    "$D/$b" load /tmp/smc.$b --json > /tmp/sm.json && python3 -c "import json; d=json.load(open('/tmp/sm.json')); r=d['runs'][0]; print('  %s: %d tensors, first load %.1f ms = %.1f us per tensor, pinned %d MiB' % ('$b', d['tensors'], r['wall_ns']/1e6, r['wall_ns']/1e3/d['tensors'], d['pinned_bytes']>>20))"
  done
done
