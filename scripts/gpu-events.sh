#!/usr/bin/env bash
# Completed events recorded again instead of created per Record: the
# engine conformance suite, the transport's CUDA tests and the loader's
# upload tests with this build, then the build before (D/prev-splitzip)
# beside this one on a 12-layer mixture of experts and the size mix.
#   scripts/gpu-events.sh D
set -uo pipefail
cd "$(dirname "$0")/.."
D=$1
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/events.log") 2>&1
"$D/cudaengine.test" -test.count=1 -test.v 2>&1 | grep -E "^(--- |\s+--- |ok|FAIL|PASS)"
(cd transport && "../$D/transport.test" -test.count=1 -test.run CUDA -test.v 2>&1 | grep -E "^(--- |ok|FAIL|PASS)")
(cd loader && "../$D/loader.test" -test.count=1 -test.v 2>&1 | grep -E "^(--- |ok|FAIL|PASS)")
compute-sanitizer --tool memcheck --error-exitcode 9 "$D/cudaengine.test" -test.count=1 2>&1 | tail -1
"$D/splitzip" gen /tmp/m --moe 64 --layers 12 --shards 4 -q && "$D/splitzip" compress /tmp/m -o /tmp/mc --no-sync -q
"$D/splitzip" gen /tmp/x --mix 4000 --shards 4 -q && "$D/splitzip" compress /tmp/x -o /tmp/xc --no-sync -q
cat /tmp/m/* /tmp/mc/objects/*/* /tmp/x/* /tmp/xc/objects/*/* >/dev/null
for c in /tmp/mc /tmp/xc; do
  "$D/splitzip" load $c --check | grep matches
  for r in 1 2; do
    for b in prev-splitzip splitzip; do
      echo "$c $b round $r: $("$D/$b" bench load $c --rounds 1 --repeat 1 | grep compare)"
    done
  done
done
