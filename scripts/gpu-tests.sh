#!/usr/bin/env bash
# The GPU tests on the GPU machine, no benchmarks (the issue 31 check):
# the GPU suites (scripts/gpu-check.sh without benchmarks), the whole
# loader suite, and the Python binding with torch
# (scripts/gpu-python.sh). Build here first:
#   make gpu-build capi && cp python/splitzip/libsplitzip.so .dev/ &&
#   tar -C .dev -cJf .dev/gpu.tar.xz splitzip libsplitzip.so *.test
# and carry .dev/gpu.tar.xz. Logs go to $OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
tar -C .dev -xJf .dev/gpu.tar.xz || exit 1
status=0
SKIP_BENCH=1 SKIP_H2D=1 CK_SIZE=512MiB bash scripts/gpu-check.sh || status=1
echo "=== whole loader suite ($(date +%T))" | tee -a "$OUT/gpu-check.log"
(cd loader && ../.dev/loader.test -test.count=1 -test.v 2>&1 | grep -E '^(---|ok|FAIL|PASS)' | tee -a "$OUT/gpu-check.log") || status=1
bash scripts/gpu-python.sh .dev || status=1
echo "gpu-tests status: $status" | tee -a "$OUT/gpu-check.log"
exit $status
