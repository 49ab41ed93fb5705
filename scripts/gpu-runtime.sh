#!/usr/bin/env bash
# The runtime's GPU tests on the GPU machine, without rebuilding the
# kernel: transport (CUDA engine: loads, faults, packing) and loader
# (batched uploads into caller memory, several streams). Build with
# `make gpu-build`. Logs go to $OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/splitzip-gpu-runtime}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/runtime.log") 2>&1
status=0
(cd transport && ../.dev/transport.test -test.v -test.count=1 -test.run 'CUDA') || status=1
(cd loader && ../.dev/loader.test -test.v -test.count=1 -test.run 'Upload') || status=1
(cd gpu && ../.dev/gpu.test -test.count=1) || status=1
echo "gpu-runtime status: $status"
exit $status
