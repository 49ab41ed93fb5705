#!/usr/bin/env bash
# Offloaded forwards and the decode kernels on the H200 (the issue 13
# work), one phase a call:  scripts/gpu-offload.sh D PHASE
# D holds splitzip and gpu.test built here (`make gpu-build` or
# CGO_ENABLED=0 go build / go test -c).
#   kernel   build both kernels with nvcc into $OUT/kernels (ptxas
#            registers and spills in the log); with them, every GPU test
#            of package gpu (2^31 values too), memcheck and racecheck on
#            the short ones, the transport, load, loader and
#            cudaengine tests; then the embedded kernels and the new ones
#            alternating, two rounds: bench decode at 512 and 64 MiB,
#            bench decode --layer, and --codec entropy for BF16 and FP8
#            (BENCH_ENTROPY=0 leaves those out)
#   python   the Python offload tests (tiers, windows, graph replay,
#            faults) with python/splitzip/libsplitzip.so built here
#   offload  scripts/gpu-offload.py: forwards of a 0.9 B Llama for each
#            tier against resident and accelerate's cpu_offload
#   offload8b  scripts/gpu-offload-8b.py: the same for a Llama-3-8B shape
#   ncu      Nsight Compute (--set full) of one in-place and one
#            out-of-place fixed-rate decode and one in-place BF16 entropy
#            decode at 512 MiB (bench decode's launches), reports in $OUT
#   pinned   scripts/gpu-offload-pinned.py: the pinned tier against raw
#            pinned packs, alternating rounds, eager and graph replays
#   timeline  scripts/gpu-offload-timeline.py: per-layer copy, scatter,
#            compute and host times of eager pinned-tier forwards
set -uo pipefail
cd "$(dirname "$0")/.."
D=$1 PHASE=$2
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/offload-$PHASE.log") 2>&1
status=0
fail() { echo "FAILED: $*"; status=1; }
step() { echo; echo "=== $* ($(date +%T))"; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader

case $PHASE in
kernel)
  step "nvcc"
  K=$OUT/kernels
  OUTDIR=$K bash scripts/build-kernels.sh 2>&1 | grep -E "built|error|warning|registers|spill|Compiling entry" | grep -B1 -A1 "sm_90'" || true
  [ -s $K/decode.fatbin ] || { echo "FAILED: no decode.fatbin"; exit 1; }
  export SPLITZIP_FATBIN=$K/decode.fatbin SPLITZIP_ENTROPY_FATBIN=$K/entropy.fatbin
  step "gpu tests with the new kernels (2^31 values too)"
  SPLITZIP_LARGE=1 timeout 400 "$D/gpu.test" -test.skip TestKernelStamp -test.v -test.count 1 2>&1 | grep -E "^(--- |PASS|FAIL|ok)|corrupt|values" | tail -40 || fail tests
  step "memcheck"
  timeout 200 compute-sanitizer --tool memcheck --error-exitcode 9 "$D/gpu.test" -test.run 'TestDecodeMatchesReference|TestDecodeFewBlocks|TestCorruptPayloads|TestScatter|TestEntropyMatchesReference|TestEntropyCorrupt' -test.short -test.count 1 2>&1 | grep -vE "^=== RUN|Host Frame|^=========\s*$" | tail -12 || fail memcheck
  step "racecheck"
  timeout 200 compute-sanitizer --tool racecheck --error-exitcode 9 "$D/gpu.test" -test.run 'TestDecodeMatchesReference|TestDecodeFewBlocks|TestScatterMatchesReference|TestEntropyMatchesReference' -test.short -test.count 1 2>&1 | tail -6 || fail racecheck
  unset SPLITZIP_FATBIN SPLITZIP_ENTROPY_FATBIN
  for t in transport:transport load:load loader:loader cudaengine:engine/cudaengine; do
    n=${t%%:*} dir=${t#*:}
    [ -x "$D/$n.test" ] || continue
    step "$n tests with the new kernel"
    # From the package's directory: tests read their testdata relative to it.
    (cd "$dir" && SPLITZIP_FATBIN=$K/decode.fatbin SPLITZIP_ENTROPY_FATBIN=$K/entropy.fatbin timeout 200 "$OLDPWD/$D/$n.test" -test.count 1 2>&1 | tail -5) || fail "$n tests"
  done
  for round in 1 2; do
    for which in embedded new; do
      if [ $which = new ]; then
        export SPLITZIP_FATBIN=$K/decode.fatbin SPLITZIP_ENTROPY_FATBIN=$K/entropy.fatbin
      else
        unset SPLITZIP_FATBIN SPLITZIP_ENTROPY_FATBIN
      fi
      step "round $round, $which kernel: bench decode"
      "$D/splitzip" bench decode --size 512MiB,64MiB --runs 30 | grep normal | cut -c1-125 || fail "bench $which"
      step "round $round, $which kernel: bench decode --layer"
      "$D/splitzip" bench decode --layer --runs 30 | grep -v copy || fail "bench layer $which"
      [ "${BENCH_ENTROPY:-1}" = 1 ] || continue
      step "round $round, $which kernel: bench decode --codec entropy"
      "$D/splitzip" bench decode --codec entropy --dtype BF16,F8_E4M3,F8_E5M2 --size 512MiB,64MiB --runs 30 | grep in-place | cut -c1-150 || fail "bench entropy $which"
    done
  done
  unset SPLITZIP_FATBIN SPLITZIP_ENTROPY_FATBIN
  ;;
python)
  step "loader pack tests"
  (cd loader && timeout 120 "$OLDPWD/$D/loader.test" -test.run 'TestScatterPack|TestPack' -test.v -test.count 1 2>&1 | tail -8) || fail "loader pack"
  step "python offload tests"
  (cd python/tests && SPLITZIP_BIN=$PWD/../../$D/splitzip timeout 500 python3 -m unittest -v ${TESTS:-test_offload test_transformers} > "$OUT/python-tests.log" 2>&1; rc=$?; grep -E '^test_|ok$|FAIL|ERROR|Error|equal|corrupt|faults' "$OUT/python-tests.log" | grep -v Writing | tail -70; exit $rc) || fail python
  ;;
offload)
  step "offload forwards"
  timeout 500 python3 scripts/gpu-offload.py "$D/splitzip" /tmp/offload-work 2>&1 | tail -60 || fail offload
  ;;
offload8b)
  step "offload forwards, 8 B parameters"
  timeout 560 python3 scripts/gpu-offload-8b.py "$D/splitzip" /tmp/offload8b 2>&1 | grep -v "it/s" | tail -40 || fail offload8b
  ;;
ncu)
  for what in "in-place:splitzip_decode:5:--codec fixed" "out-of-place:splitzip_decode:26:--codec fixed" \
              "entropy-in-place:splitzip_entropy_decode:5:--codec entropy --dtype BF16"; do
    IFS=: read -r name kernel skip flags <<<"$what"
    step "ncu: $name ($kernel, launch $skip)"
    timeout 250 ncu --clock-control none --set full --kernel-name "$kernel" --launch-skip "$skip" --launch-count 1 -o "$OUT/ncu-$name" \
      "$D/splitzip" bench decode --size 512MiB --runs 20 $flags >/dev/null 2>"$OUT/ncu-$name.err" || fail "ncu $name"
    ncu --import "$OUT/ncu-$name.ncu-rep" --page details --print-units base 2>&1 |
      grep -E "DRAM Throughput|Memory Throughput|Duration|Achieved Occupancy|Registers Per|Block Limit|Warp Cycles Per Issued|Issued Warp|L2 Hit|Mem Busy|Max Bandwidth|Stall|Theoretical Occ|Eligible|Active Warps" | head -40
  done
  ;;
pinned)
  step "pinned tier against raw pinned packs"
  timeout 400 python3 scripts/gpu-offload-pinned.py "$D/splitzip" /tmp/offload-work 3 2>&1 | grep -v "it/s" | tail -20 || fail pinned
  ;;
timeline)
  step "eager pinned-tier timelines"
  timeout 300 python3 scripts/gpu-offload-timeline.py "$D/splitzip" /tmp/offload-work ${WP:-4 2 2 1 4 3} 2>&1 | tail -150 || fail timeline
  ;;
*)
  echo "unknown phase $PHASE"; exit 2
  ;;
esac
echo; echo "status $status"
exit $status
