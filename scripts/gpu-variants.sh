#!/usr/bin/env bash
# Kernel tuning on the GPU machine: builds sm_90 variants of decode.cu with
# different -D settings and times each with `splitzip bench decode`.
# Usage: VARIANTS="SZ_MIN_BLOCKS=4 SZ_MIN_BLOCKS=5" bash scripts/gpu-variants.sh
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/splitzip-variants}
mkdir -p "$OUT"
for v in ${VARIANTS:-SZ_MIN_BLOCKS=4}; do
  echo "=== variant $v"
  nvcc -O3 -std=c++17 --fatbin -Xptxas -v -gencode arch=compute_90,code=sm_90 -D"$v" -o /tmp/variant.fatbin gpu/decode.cu 2>&1 | grep -E "registers|stack"
  SPLITZIP_FATBIN=/tmp/variant.fatbin .dev/splitzip bench decode --size ${BENCH_SIZES:-512MiB,64MiB,1MiB} --runs 30 | tee -a "$OUT/variants.txt"
done
