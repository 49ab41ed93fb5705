#!/usr/bin/env bash
# Host read rates of a cache's objects from the page cache on the device
# machine (BenchmarkReadObjects), beside a load of the same cache:
#   scripts/gpu-readbench.sh D "GEN FLAGS"
set -uo pipefail
cd "$(dirname "$0")/.."
D=$1 GEN=$2
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/readbench.log") 2>&1
rm -rf /tmp/rb /tmp/rb.c
"$D/splitzip" gen /tmp/rb $GEN -q && "$D/splitzip" compress /tmp/rb -o /tmp/rb.c --no-sync -q || exit 1
cat /tmp/rb/* /tmp/rb.c/objects/*/* >/dev/null
nproc; grep -m1 "model name" /proc/cpuinfo; lscpu | grep -iE "cache|numa" | head
SPLITZIP_BENCH_CACHE=/tmp/rb.c "$D/transport.test" -test.run XXX -test.bench ReadObjects -test.benchtime 5x
for m in --raw "" --raw ""; do "$D/splitzip" load /tmp/rb.c $m | head -1; done
rm -rf /tmp/rb /tmp/rb.c
