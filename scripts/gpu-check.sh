#!/usr/bin/env bash
# Runs on the GPU machine (no Go there): rebuilds the kernel, runs the GPU
# tests, compute-sanitizer, verify --gpu on a generated checkpoint and the
# benchmarks. Build the binaries first with `make gpu-build` and carry .dev.
# Logs and JSON go to $OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/splitzip-gpu-check}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/gpu-check.log") 2>&1
step() { echo; echo "=== $* ($(date +%T))"; }
status=0
fail() { echo "FAILED: $*"; status=1; }

step "machine"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv
nvcc --version | tail -2

step "kernels"
bash scripts/build-kernels.sh || fail "kernel build"
cp gpu/decode.fatbin gpu/kernels_gen.go "$OUT/" 2>/dev/null
# Test with the kernel just built, whatever fatbin the binaries embed.
export SPLITZIP_FATBIN=$PWD/gpu/decode.fatbin
cuobjdump --list-elf gpu/decode.fatbin; cuobjdump --list-ptx gpu/decode.fatbin
cuobjdump --dump-sass gpu/decode.fatbin > "$OUT/decode.sass" 2>/dev/null

step "cuda binding tests"
.dev/cuda.test -test.v -test.count=1 || fail "cuda tests"
step "gpu tests"
(cd gpu && ../.dev/gpu.test -test.v -test.count=1 ${GPU_TEST_ARGS:-}) || fail "gpu tests"
step "engine conformance suite on the CUDA engine"
.dev/cudaengine.test -test.v -test.count=1 || fail "cudaengine conformance"
step "transport and loader tests (CUDA engine, uploads into caller memory)"
(cd transport && ../.dev/transport.test -test.v -test.count=1 -test.run 'CUDA') || fail "transport cuda tests"
(cd load && ../.dev/load.test -test.v -test.count=1 -test.run 'CUDA') || fail "load cuda tests"
(cd loader && ../.dev/loader.test -test.v -test.count=1 -test.run 'Upload') || fail "loader upload tests"
if [ -n "${LARGE:-}" ]; then
  step "large tensor"
  SPLITZIP_LARGE=1 .dev/gpu.test -test.v -test.run TestLarge -test.count=1 || fail "large"
fi
step "compute-sanitizer memcheck"
compute-sanitizer --tool memcheck --error-exitcode 9 .dev/gpu.test -test.short -test.run "TestDecodeMatchesReference|TestCorruptPayloads|TestScatter" -test.count=1 > "$OUT/memcheck.log" 2>&1 || fail "memcheck"
tail -5 "$OUT/memcheck.log"
step "compute-sanitizer racecheck"
compute-sanitizer --tool racecheck --error-exitcode 9 .dev/gpu.test -test.short -test.run "TestDecodeMatchesReference|TestScatterMatchesReference" -test.count=1 > "$OUT/racecheck.log" 2>&1 || fail "racecheck"
tail -5 "$OUT/racecheck.log"

if [ -z "${SKIP_VERIFY:-}" ]; then
  step "verify --gpu on a generated checkpoint"
  rm -rf /tmp/sz-ck /tmp/sz-cache
  .dev/splitzip gen /tmp/sz-ck --size ${CK_SIZE:-1GiB} --shards 4 -q &&
    .dev/splitzip compress /tmp/sz-ck -o /tmp/sz-cache --no-sync -q &&
    .dev/splitzip verify /tmp/sz-cache --gpu -q || fail "verify --gpu"
fi

if [ -z "${SKIP_BENCH:-}" ]; then
  step "bench decode"
  .dev/splitzip bench decode --size ${BENCH_SIZES:-512MiB,64MiB,1MiB} --runs 30 --json > "$OUT/bench-decode.json" || fail "bench decode"
  .dev/splitzip bench decode --size ${BENCH_SIZES:-512MiB,64MiB,1MiB} --runs 30 || fail "bench decode (text)"
fi
if [ -z "${SKIP_H2D:-}" ]; then
  step "bench h2d"
  .dev/splitzip bench h2d --json > "$OUT/bench-h2d.json" || fail "bench h2d"
  .dev/splitzip bench h2d
fi
if [ -n "${NCU:-}" ]; then
  step "ncu (clock control none), one 512 MiB in-place launch"
  ncu --clock-control none --kernel-name splitzip_decode --launch-skip 10 --launch-count 1 \
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats --section WarpStateStats --section SchedulerStats \
    .dev/splitzip bench decode --size 512MiB --runs 20 > "$OUT/ncu.txt" 2>&1 || fail "ncu"
  grep -E "Duration|Throughput|Achieved Occupancy|Registers|Theoretical Occupancy|Warp Cycles Per Issued|Stall|Eligible|Issued Warp|Block Limit" "$OUT/ncu.txt" | head -40
fi
echo; echo "gpu-check status: $status"
exit $status
