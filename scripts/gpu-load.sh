#!/usr/bin/env bash
# Load-time measurements on the GPU machine: generates a checkpoint of
# LOAD_SIZE (default 8GiB), compresses it, checks both transports bit for
# bit, then alternates raw and SplitZip loads: first loads from page cache
# and re-faults from pinned-resident bytes. Build with `make gpu-build`.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/splitzip-gpu-load}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/load.log") 2>&1
step() { echo; echo "=== $* ($(date +%T))"; }
status=0
fail() { echo "FAILED: $*"; status=1; }
CK=/tmp/sz-load-ck; CACHE=/tmp/sz-load-cache
step "generate and compress ${LOAD_SIZE:-8GiB}"
rm -rf $CK $CACHE
.dev/splitzip gen $CK --size ${LOAD_SIZE:-8GiB} --shards 8 -q || fail gen
.dev/splitzip compress $CK -o $CACHE --no-sync -q || fail compress
step "load --check, both paths"
.dev/splitzip load $CACHE --raw --check || fail "raw check"
.dev/splitzip load $CACHE --check || fail "splitzip check"
step "loads from page cache, alternating (run 2 of each: staging set up)"
.dev/splitzip load $CACHE --compare 2 --repeat 2 || fail "compare cold"
step "re-faults from pinned-resident bytes, alternating"
.dev/splitzip load $CACHE --compare 2 --resident --repeat 4 || fail "compare resident"
echo; echo "gpu-load status: $status"
exit $status
