#!/usr/bin/env bash
# Fixed-rate decoder variants on the H200, same run: each argument is
# name:nvcc-flags; each is built into $OUT/v-name, checked bit for bit
# (TestDecodeMatchesReference, TestCorruptPayloads) and timed with bench
# decode at SZ (default 512MiB,64MiB), alternating with the embedded
# kernel. D (default .dev/g13) holds splitzip and gpu.test. A variant
# names -D macros that decode.cu must define for the experiment (the
# committed source keeps only what was measured better; see
# docs/perf-logs/2026-12-01-issue13-kernels/ for the ones tried).
set -uo pipefail
cd "$(dirname "$0")/.."
D=${D:-.dev/g13}
for round in 1 2; do
  echo "== round $round: embedded"
  "$D/splitzip" bench decode --size "${SZ:-512MiB,64MiB}" --runs 30 | grep normal | cut -c1-125
  for v in "$@"; do
    name=${v%%:*} flags=${v#*:}
    K=$OUT/v-$name
    if [ ! -s $K/decode.fatbin ]; then
      NVCC_EXTRA="$flags" OUTDIR=$K bash scripts/build-kernels.sh 2>&1 | grep -A1 "splitzip_decode' for 'sm_90" | tail -1
      SPLITZIP_FATBIN=$K/decode.fatbin timeout 120 "$D/gpu.test" -test.run 'TestDecodeMatchesReference|TestDecodeFewBlocks|TestCorruptPayloads|TestScatterMatchesReference' -test.v -test.count 1 2>&1 | grep -E "^(--- |PASS|FAIL)" | tail -8
    fi
    echo "== round $round: $name ($flags)"
    SPLITZIP_FATBIN=$K/decode.fatbin "$D/splitzip" bench decode --size "${SZ:-512MiB,64MiB}" --runs 30 | grep normal | cut -c1-125
  done
done
