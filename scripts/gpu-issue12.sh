#!/usr/bin/env bash
# Issue 12 on the H200, one phase a call:  scripts/gpu-issue12.sh D PHASE
# D holds splitzip and gpu.test built here (`make gpu-build`).
#   kernel   build both kernels with nvcc into $OUT/kernels (ptxas
#            register and spill counts in the log), then run the entropy
#            GPU tests with the new entropy kernel, memcheck and racecheck
#            on the short tests, and a first timing at 64 MiB
#   tests    every GPU test of package gpu with the embedded kernels,
#            the 2^31-value tests, memcheck and racecheck
#   bench    bench decode --codec entropy for every dtype at 64 and 512
#            MiB beside the fixed-rate decoder, same run
# With K set (a directory holding entropy.fatbin built on this machine),
# tests use that kernel instead of the embedded one.
set -uo pipefail
cd "$(dirname "$0")/.."
D=$1 PHASE=$2
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/issue12-$PHASE.log") 2>&1
status=0
fail() { echo "FAILED: $*"; status=1; }
step() { echo; echo "=== $* ($(date +%T))"; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
skip=()
if [ -n "${K:-}" ]; then
  export SPLITZIP_ENTROPY_FATBIN=$K/entropy.fatbin
  skip=(-test.skip TestKernelStamp)
fi

bench() { # sizes
  step "bench decode --codec entropy, sizes $1"
  "$D/splitzip" bench decode --codec entropy --dtype BF16,F16,F32,F8_E4M3,F8_E5M2 --size "$1" --runs 30 || fail "bench entropy"
  step "bench decode --codec fixed, sizes $1"
  "$D/splitzip" bench decode --size "$1" --runs 30 || fail "bench fixed"
}

case $PHASE in
kernel)
  step "nvcc"
  K=$OUT/kernels
  OUTDIR=$K bash scripts/build-kernels.sh 2>&1 | grep -E "built|error|warning|registers|spill|smem|Compiling entry" || fail nvcc
  [ -s $K/entropy.fatbin ] || { fail "no entropy.fatbin"; exit 1; }
  export SPLITZIP_ENTROPY_FATBIN=$K/entropy.fatbin
  step "entropy tests"
  timeout 300 "$D/gpu.test" -test.run 'Entropy' -test.skip TestKernelStamp -test.v -test.count 1 2>&1 | grep -vE "^=== RUN" | tail -40 || fail tests
  step "memcheck"
  timeout 240 compute-sanitizer --tool memcheck --error-exitcode 9 "$D/gpu.test" -test.run 'TestEntropyMatchesReference|TestEntropyCorrupt' -test.short -test.count 1 2>&1 | grep -vE "^=== RUN|Host Frame|^=========\s*$" | head -40 || fail memcheck
  step "racecheck"
  timeout 240 compute-sanitizer --tool racecheck --error-exitcode 9 "$D/gpu.test" -test.run 'TestEntropyMatchesReference' -test.short -test.count 1 2>&1 | tail -8 || fail racecheck
  step "first timing"
  "$D/splitzip" bench decode --codec entropy --dtype BF16,F8_E4M3,F32 --size 64MiB --runs 20 || fail "bench"
  ;;
tests)
  step "gpu tests"
  SPLITZIP_LARGE=1 timeout 500 "$D/gpu.test" -test.v -test.count 1 "${skip[@]}" 2>&1 | grep -E "^(---|ok|FAIL|PASS)|entropy_test|gpu_test" | tail -60 || fail tests
  step "memcheck"
  timeout 300 compute-sanitizer --tool memcheck --error-exitcode 9 "$D/gpu.test" -test.run 'Entropy|TestDecodeMatches|TestCorrupt' -test.short -test.count 1 "${skip[@]}" 2>&1 | tail -6 || fail memcheck
  step "racecheck"
  timeout 300 compute-sanitizer --tool racecheck --error-exitcode 9 "$D/gpu.test" -test.run 'Entropy' -test.short -test.count 1 "${skip[@]}" 2>&1 | tail -6 || fail racecheck
  ;;
bench)
  bench 64MiB,512MiB
  ;;
*)
  echo "unknown phase $PHASE"; exit 2 ;;
esac
echo "status $status"
exit $status
