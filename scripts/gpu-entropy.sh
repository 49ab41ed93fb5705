#!/usr/bin/env bash
# Entropy payloads on the H200 (the issue 12 work), one phase a call:
#   scripts/gpu-entropy.sh D PHASE
# D holds splitzip and gpu.test built here (`make gpu-build`).
#   kernel   build both kernels with nvcc into $OUT/kernels (ptxas
#            register and spill counts in the log), then run the entropy
#            GPU tests with the new entropy kernel, memcheck and racecheck
#            on the short tests, and a first timing at 64 MiB
#   tests    every GPU test of package gpu with the embedded kernels,
#            the 2^31-value tests, memcheck and racecheck
#   bench    bench decode --codec entropy for every dtype at 64 and 512
#            MiB beside the fixed-rate decoder, same run
#   final    build the kernels into $OUT/kernels, then with them: every
#            GPU test of gpu (2^31 values too), the engine conformance
#            suite on the CUDA engine, transport's and loadbench's CUDA
#            tests, memcheck and racecheck, and the bench phase
#   loads    a 4 GiB Llama-shaped checkpoint compressed fixed and entropy:
#            raw and fixed loads with the source there, entropy loads
#            (decoded on the device, and on the host) with it gone; from
#            page cache, pinned-resident re-faults and cold (page cache
#            dropped). D also holds cudaengine.test, transport.test and
#            loadbench.test for final.
# With K set (a directory holding entropy.fatbin built on this machine),
# tests use that kernel instead of the embedded one.
set -uo pipefail
cd "$(dirname "$0")/.."
D=$1 PHASE=$2
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/entropy-$PHASE.log") 2>&1
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
final)
  step "nvcc"
  K=$OUT/kernels
  OUTDIR=$K bash scripts/build-kernels.sh 2>&1 | grep -E "built|error|registers|spill" || fail nvcc
  export SPLITZIP_ENTROPY_FATBIN=$K/entropy.fatbin
  step "gpu tests (2^31 values too)"
  SPLITZIP_LARGE=1 timeout 300 "$D/gpu.test" -test.v -test.count 1 -test.skip TestKernelStamp 2>&1 | grep -E "^(---|ok|FAIL|PASS)|entropy_test.go:[0-9]+: [A-Z0-9]|[0-9]+ of [0-9]+ corrupt|values .* decoded" | tail -40 || fail "gpu tests"
  step "conformance suite, CUDA engine"
  timeout 120 "$D/cudaengine.test" -test.v -test.count 1 2>&1 | grep -E "^(--- |ok|FAIL|PASS)|    --- " | tail -30 || fail cudaengine
  step "transport and loadbench CUDA tests"
  timeout 120 "$D/transport.test" -test.run CUDA -test.v -test.count 1 2>&1 | grep -E "^(--- |ok|FAIL|PASS)" | tail -20 || fail transport
  timeout 120 "$D/loadbench.test" -test.run CUDA -test.v -test.count 1 2>&1 | grep -E "^(--- |ok|FAIL|PASS)|load_test|cuda_test" | tail -20 || fail loadbench
  step "memcheck"
  timeout 200 compute-sanitizer --tool memcheck --error-exitcode 9 "$D/gpu.test" -test.run 'Entropy' -test.short -test.count 1 -test.skip 'TestKernelStamp|Large' 2>&1 | tail -4 || fail memcheck
  step "racecheck"
  timeout 200 compute-sanitizer --tool racecheck --error-exitcode 9 "$D/gpu.test" -test.run 'TestEntropyMatchesReference|TestEntropyCorrupt' -test.short -test.count 1 -test.skip TestKernelStamp 2>&1 | tail -4 || fail racecheck
  bench 64MiB,512MiB
  ;;
verify) # the embedded kernels: their stamp, DecodeStream of entropy
  # payloads, the loader's GPU tests, and verify --gpu of an entropy cache
  step "gpu tests, embedded kernels"
  timeout 120 "$D/gpu.test" -test.run 'TestKernelStamp|TestEntropyDecodeStream|TestEntropyMatchesReference' -test.short -test.v -test.count 1 2>&1 | grep -E "^(---|ok|FAIL|PASS)" || fail "gpu tests"
  step "loader tests"
  timeout 120 "$D/loader.test" -test.count 1 2>&1 | tail -3 || fail loader
  step "verify --gpu"
  rm -rf /tmp/v /tmp/v.c; "$D/splitzip" gen /tmp/v --size 256MiB -q && "$D/splitzip" compress /tmp/v -o /tmp/v.c --codec entropy --no-sync -q || fail gen
  "$D/splitzip" verify /tmp/v.c --gpu || fail "verify --gpu"
  "$D/splitzip" verify /tmp/v.c || fail "verify"
  ;;
loads)
  S=/tmp/ent
  rm -rf $S $S.gone $S.fixed $S.entropy
  step "gen and compress"
  "$D/splitzip" gen $S --size 4GiB --shards 4 -q || fail gen
  "$D/splitzip" compress $S -o $S.fixed --no-sync -q --self-contained || fail compress
  "$D/splitzip" compress $S -o $S.entropy --codec entropy --no-sync -q --self-contained || fail compress
  "$D/splitzip" inspect $S.entropy | tail -4
  du -sb $S $S.fixed/objects $S.entropy/objects
  rate() { python3 -c 'import json,sys; r=json.load(sys.stdin); g=[x["gb_per_s"] for x in r["runs"]]; print("first %.1f GB/s, re-faults %s" % (g[0], " ".join("%.1f" % v for v in g[1:])))'; }
  first() { "$D/splitzip" load "$@" --json | rate; }
  warm() { cat $S/* $S.fixed/objects/*/* $S.entropy/objects/*/* > /dev/null 2>&1; }
  warm
  for r in 1 2 3; do
    echo "r$r raw:     $(first $S.fixed --raw)"
    echo "r$r fixed:   $(first $S.fixed)"
    echo "r$r raw res: $(first $S.fixed --raw --resident --repeat 4)"
    echo "r$r fix res: $(first $S.fixed --resident --repeat 4)"
  done
  step "cold, source there"
  for c in raw fixed; do
    sync; echo 3 > /proc/sys/vm/drop_caches
    if [ $c = raw ]; then echo "cold raw:   $(first $S.fixed --raw)"; else echo "cold fixed: $(first $S.fixed)"; fi
  done
  mv $S $S.gone
  warm() { cat $S.entropy/objects/*/* > /dev/null 2>&1; }
  warm
  step "entropy, source gone"
  "$D/splitzip" load $S.entropy --check | grep -E "^load|matches|entropy" || fail "entropy load --check"
  for r in 1 2 3; do
    echo "r$r entropy device: $(first $S.entropy)"
    echo "r$r entropy host:   $(first $S.entropy --entropy-on-host)"
    echo "r$r entropy res:    $(first $S.entropy --resident --repeat 4)"
  done
  sync; echo 3 > /proc/sys/vm/drop_caches
  echo "cold entropy device: $(first $S.entropy)"
  rm -rf $S.gone $S.fixed $S.entropy
  ;;
*)
  echo "unknown phase $PHASE"; exit 2 ;;
esac
echo "status $status"
exit $status
