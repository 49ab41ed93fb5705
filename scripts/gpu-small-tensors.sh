#!/usr/bin/env bash
# Many small tensors on the GPU machine (issue 4): a checkpoint of SMALL
# (default 20000) BF16 tensors of 1-64 KiB against one of large tensors of
# about the same size, both from page cache, raw and SplitZip alternating;
# then the small one without packing, for the effect of packing. Build with
# `make gpu-build`; set SPLITZIP_FATBIN to test a kernel not yet embedded.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/splitzip-gpu-small-tensors}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/small-tensors.log") 2>&1
step() { echo; echo "=== $* ($(date +%T))"; }
status=0
fail() { echo "FAILED: $*"; status=1; }
S=/tmp/sz-small; L=/tmp/sz-large
rm -rf $S $L $S.cache $L.cache
step "generate and compress ${SMALL:-20000} small tensors and a large-tensor checkpoint"
.dev/splitzip gen $S --small ${SMALL:-20000} --shards 2 -q || fail gen
.dev/splitzip compress $S -o $S.cache --no-sync -q || fail compress
size=$(du -sb $S | cut -f1)
.dev/splitzip gen $L --size $size --shards 2 -q || fail gen
.dev/splitzip compress $L -o $L.cache --no-sync -q || fail compress
.dev/splitzip inspect $S.cache | tail -1
.dev/splitzip inspect $L.cache | tail -1
step "load --check, both paths, small tensors"
.dev/splitzip load $S.cache --raw --check || fail "raw check"
.dev/splitzip load $S.cache --check || fail "splitzip check"
step "small tensors, packed: alternating raw and SplitZip"
.dev/splitzip load $S.cache --compare 3 --repeat 2 --json > "$OUT/small-packed.json" || fail "compare small"
.dev/splitzip load $S.cache --compare 3 --repeat 2 | tail -1
step "large tensors, same size: alternating raw and SplitZip"
.dev/splitzip load $L.cache --compare 3 --repeat 2 --json > "$OUT/large.json" || fail "compare large"
.dev/splitzip load $L.cache --compare 3 --repeat 2 | tail -1
step "small tensors, not packed (--small-bytes -1)"
.dev/splitzip load $S.cache --compare 2 --repeat 2 --small-bytes -1 | tail -1
step "small tensors, resident re-faults"
.dev/splitzip load $S.cache --compare 2 --resident --repeat 3 | tail -1
echo; echo "gpu-small-tensors status: $status"
exit $status
