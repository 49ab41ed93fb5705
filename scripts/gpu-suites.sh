#!/usr/bin/env bash
# The GPU test suites, quickly, on the GPU machine (no Go there): the CUDA
# binding, the kernels (short), the CUDA engine's conformance suite, the
# transports, loads and the C ABI's loader on the GPU, then the Python
# tests that use the GPU and transformers. Each suite has a time limit so
# that what comes first reports even when device time runs out. Build
# here first (stripped, to travel under the carry limit):
#   F='-ldflags=-s -w'; CGO_ENABLED=0 go build "$F" -o .dev/gpu/splitzip ./cmd/splitzip
#   for t in gpu:./gpu cuda:./gpu/cuda cudaengine:./engine/cudaengine transport:./transport \
#            load:./load loader:./loader; do
#     CGO_ENABLED=0 go test -c "$F" -o .dev/gpu/${t%%:*}.test ${t#*:}; done
#   make capi
# and carry .dev/gpu and python/splitzip/libsplitzip.so.
#   scripts/gpu-suites.sh [go|python|all]      (default all)
# PY_TESTS names the Python test modules (default: those that use the GPU).
# Logs go to $OUT; the last line says which suites failed.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/out}
D=${D:-.dev/gpu}
mkdir -p "$OUT"
what=${1:-all}
failed=()
. scripts/gpu-lib.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/machine.txt"
B=$PWD/$D
if [ "$what" != python ]; then
	suite cuda 30 gpu/cuda "$B/cuda.test" -test.v -test.count=1
	suite gpu 60 gpu "$B/gpu.test" -test.v -test.count=1 -test.short
	suite cudaengine 45 engine/cudaengine "$B/cudaengine.test" -test.v -test.count=1
	suite transport 45 transport "$B/transport.test" -test.v -test.count=1 -test.run CUDA
	suite load 30 load "$B/load.test" -test.v -test.count=1 -test.run CUDA
	suite loader 60 loader "$B/loader.test" -test.v -test.count=1
fi
if [ "$what" != go ]; then
	export SPLITZIP_BIN=$B/splitzip SPLITZIP_LIB=$PWD/python/splitzip/libsplitzip.so
	suite python 300 python/tests python3 -m unittest -v ${PY_TESTS:-test_offload test_offload_experts test_transformers test_source test_pieces test_shared}
fi
echo "gpu-suites: failed: ${failed[*]:-none}" | tee "$OUT/summary.txt"
[ ${#failed[@]} -eq 0 ]
