#!/usr/bin/env bash
# Builds a changed kernel on the GPU machine and checks it before its
# fatbin is committed: compiles KERNELS (default entropy) into
# $OUT/kernels (scripts/build-kernels.sh; bring back the fatbins and
# kernels_gen.go from there), then runs the Go GPU suites of the test
# binaries in D (built as scripts/gpu-suites.sh says) with the new fatbins
# (SPLITZIP_FATBIN, SPLITZIP_ENTROPY_FATBIN, SPLITZIP_GEMV_FATBIN), and
# SAN_RUN's tests of the gpu package under compute-sanitizer memcheck.
# The stamp test is skipped: the embedded fatbins are the old ones.
#   scripts/gpu-new-kernel.sh D
# With the kernels built, D/NAME-new runs D/NAME with them for each NAME
# of WRAP (default splitzip), for measurements beside a baseline
# D/base-splitzip, which keeps its own.
set -uo pipefail
cd "$(dirname "$0")/.."
D=$(cd "$1" && pwd)
OUT=${OUT:-/tmp/out}
K=$OUT/kernels
mkdir -p "$K"
failed=()
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/machine.txt"
echo "=== build ($(date +%T))"
OUTDIR=$K KERNELS=${KERNELS:-entropy} bash scripts/build-kernels.sh >"$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; echo "gpu-new-kernel: the build failed"; exit 1; }
grep -E "^built|registers|spill" "$OUT/build.log" | grep -E "built|entropy_batch|spill" | head -20
for k in ${KERNELS:-entropy}; do
	case $k in
	decode) export SPLITZIP_FATBIN=$K/decode.fatbin ;;
	entropy) export SPLITZIP_ENTROPY_FATBIN=$K/entropy.fatbin ;;
	gemv) export SPLITZIP_GEMV_FATBIN=$K/gemv.fatbin ;;
	esac
done
. scripts/gpu-lib.sh
SUITE_LINES='entropy_batch_test|enginetest'
suite gpu 150 gpu "$D/gpu.test" -test.v -test.count=1 -test.short -test.skip Stamp
suite memcheck 200 gpu compute-sanitizer --tool memcheck --error-exitcode 9 "$D/gpu.test" -test.count=1 -test.short -test.run "${SAN_RUN:-EntropyBatch}"
suite cudaengine 60 engine/cudaengine "$D/cudaengine.test" -test.v -test.count=1
suite transport 60 transport "$D/transport.test" -test.v -test.count=1 -test.run CUDA
suite load 45 load "$D/load.test" -test.v -test.count=1 -test.run CUDA
suite loader 60 loader "$D/loader.test" -test.v -test.count=1
for b in ${WRAP:-splitzip}; do
	cat >"$D/$b-new" <<SH
#!/bin/sh
SPLITZIP_FATBIN=${SPLITZIP_FATBIN:-} SPLITZIP_ENTROPY_FATBIN=${SPLITZIP_ENTROPY_FATBIN:-} SPLITZIP_GEMV_FATBIN=${SPLITZIP_GEMV_FATBIN:-} exec "$D/$b" "\$@"
SH
	chmod +x "$D/$b-new"
done
echo "gpu-new-kernel: failed: ${failed[*]:-none}" | tee "$OUT/summary.txt"
[ ${#failed[@]} -eq 0 ]
