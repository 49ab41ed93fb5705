#!/usr/bin/env bash
# Everything the load-time runtime (issue 4) and the loader binding
# (issue 5) are checked and measured with on the GPU machine, in one call:
# the runtime's GPU tests, memcheck of the scatter kernel and of batched
# uploads, many small tensors, the 8 GiB load comparison and PyTorch.
# Build first with `make gpu-build capi`; carry .dev and
# python/splitzip/libsplitzip.so. Logs go to $OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
export OUT=${OUT:-/tmp/splitzip-gpu}
mkdir -p "$OUT"
status=0
bash scripts/gpu-runtime.sh > /dev/null 2>&1 || status=1
grep -E "^(--- |gpu-runtime)" "$OUT/runtime.log"
compute-sanitizer --tool memcheck --error-exitcode 9 .dev/gpu.test -test.short -test.run 'TestScatter' -test.count=1 > "$OUT/memcheck.log" 2>&1 || status=1
(cd loader && compute-sanitizer --tool memcheck --error-exitcode 9 ../.dev/loader.test -test.run 'TestUploadBatch' -test.count=1) >> "$OUT/memcheck.log" 2>&1 || status=1
grep -E "ERROR SUMMARY|^(ok|PASS|FAIL)" "$OUT/memcheck.log"
timeout 150 bash scripts/gpu-small.sh > /dev/null 2>&1 || status=1
grep -v "^  moved" "$OUT/small.log" | grep -E "load |compare|status"
.dev/splitzip load /tmp/sz-small.cache --compare 2 --repeat 2 --ahead 8 | tail -1
LOAD_SIZE=8GiB timeout 240 bash scripts/gpu-load.sh > /dev/null 2>&1 || status=1
grep -E "load .*run 1|compare|status" "$OUT/load.log"
timeout 200 bash scripts/gpu-torch.sh > /dev/null 2>&1 || status=1
tail -8 "$OUT/torch.log"
echo "all: $status"
exit $status
