#!/usr/bin/env bash
# Loads of the real-weights checkpoints (npm packages converted by
# scripts/real-weights.sh), raw beside compressed in one process (bench
# load), by this build and a baseline build, fixed and entropy caches.
# Carry .dev/bench.tar.xz holding sz-new, sz-base and rw/<checkpoint>/.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT" /tmp/rwab && tar -C /tmp/rwab -xJf .dev/bench.tar.xz || exit 1
exec > >(tee -a "$OUT/realweights-ab.log") 2>&1
cd /tmp/rwab
for c in rw/*/; do
  c=$(basename "$c")
  for b in base new; do
    for codec in fixed entropy; do
      ./sz-$b compress rw/$c -o c-$b-$codec-$c --codec $codec --no-sync -q >/dev/null || echo "FAILED compress $b $codec $c"
    done
  done
  for round in 1 2; do
    for b in base new; do
      for codec in fixed entropy; do
        echo "=== $c $b $codec round $round"
        ./sz-$b bench load c-$b-$codec-$c --rounds 3 | grep -vE "^\s*(settings|summed|moved)"
      done
    done
  done
done
