#!/usr/bin/env bash
# Fixed-rate decoder changes on the H200, against a baseline binary, in
# one call: scripts/gpu-decode-ab.sh D BASE PHASES..., with D holding
# splitzip and the test binaries built from the working tree and BASE a
# splitzip built from the baseline commit (its embedded kernels).
#   build    nvcc the working tree's kernels into $OUT/kernels (registers
#            and spills in the log); later phases load its decode.fatbin
#   check    the fixed-rate and scatter GPU tests with it, then memcheck
#            and racecheck on the reference, few-blocks and corrupt tests
#   ab       ROUNDS (default 2) rounds alternating BASE and the new kernel:
#            bench decode at SZ (default 512MiB,64MiB) and --layer; with
#            PREV (a decode.fatbin) that kernel too, after the new one;
#            NEWSTAGES sets SPLITZIP_DECODE_STAGES for the new one
#   stages   the new kernel with SPLITZIP_DECODE_STAGES at each of STAGES
#            (default 2 3 4 6), 512 MiB and 64 MiB
#   variants each of VARIANTS (name:nvcc-flags, flags comma-separated)
#            built into /tmp/v-name (VDIR), checked by the reference test and
#            timed beside the new kernel
#   trace    each of TRACES (name:nvcc-flags) built with -DSZ_TRACE; bench
#            decode prints the blocks' stamps of its last launch
#   race     racecheck of the decode tests with RACE (default the new
#            kernel's fatbin), every hazard line printed
#   suites   with it: the 2^31+5-value test, the engine conformance suite,
#            the transport CUDA tests and the loader
#   python   with it: the Python tests (torch there: the offload tiers
#            decode through it), D holding libsplitzip.so
#   ncu      Nsight Compute (--set full, --clock-control none) of one
#            in-place 512 MiB launch of the new kernel
set -uo pipefail
cd "$(dirname "$0")/.."
. scripts/gpu-lib.sh
ab_setup decode-ab.log "$@"
shift 2
bench() {
  timeout 120 "$@" bench decode --size "${SZ:-512MiB,64MiB}" --runs 30 | grep -E "normal|copy" | cut -c1-150
  [ -n "${NOLAYER:-}" ] || timeout 120 "$@" bench decode --layer --runs 30 | grep -E "layer|launch" | cut -c1-150
}
for phase in "$@"; do
  case $phase in
  build)
    step "nvcc"
    OUTDIR=$K bash scripts/build-kernels.sh 2>&1 | grep -E -A3 "_decode' for 'sm_(80|90)|scatter' for 'sm_90|^built" || fail nvcc
    ;;
  check)
    export SPLITZIP_FATBIN=$K/decode.fatbin
    step "fixed-rate and scatter GPU tests"
    (cd gpu && timeout 300 "../$D/gpu.test" -test.skip 'TestKernelStamp|Entropy' -test.v -test.count 1 2>&1 | grep -E "^(--- |PASS|FAIL|ok)|_test.go:[0-9]+: " | tail -30) || fail tests
    for tool in memcheck racecheck; do
      step "compute-sanitizer $tool"
      (cd gpu && timeout 300 compute-sanitizer --tool $tool --error-exitcode 9 "../$D/gpu.test" -test.run 'TestDecodeMatchesReference|TestDecodeFewBlocks|TestCorruptPayloads|TestScatterMatchesReference' -test.short -test.count 1 2>&1 | tail -4) || fail $tool
    done
    unset SPLITZIP_FATBIN
    ;;
  ab)
    for r in $(seq 1 "${ROUNDS:-2}"); do
      step "round $r: baseline"
      bench "$BASE"
      step "round $r: new"
      SPLITZIP_DECODE_STAGES=${NEWSTAGES:-} SPLITZIP_FATBIN=$K/decode.fatbin bench "$D/splitzip"
      if [ -n "${PREV:-}" ]; then
        step "round $r: $PREV"
        SPLITZIP_FATBIN=$PREV NOLAYER=1 bench "$D/splitzip"
      fi
    done
    ;;
  stages)
    for n in ${STAGES:-2 3 4 6}; do
      step "stages $n"
      SPLITZIP_DECODE_STAGES=$n SPLITZIP_FATBIN=$K/decode.fatbin NOLAYER=1 bench "$D/splitzip"
    done
    ;;
  variants)
    for v in ${VARIANTS:-}; do
      name=${v%%:*} flags=${v#*:}
      V=${VDIR:-/tmp}/v-$name
      step "variant $name ($flags)"
      KERNELS=decode NVCC_EXTRA="${flags//,/ }" OUTDIR=$V bash scripts/build-kernels.sh 2>&1 | grep -A1 "_decode' for 'sm_90" | tail -1 || { fail "nvcc $name"; continue; }
      (cd gpu && SPLITZIP_FATBIN=$V/decode.fatbin timeout 120 "../$D/gpu.test" -test.run 'TestDecodeMatchesReference|TestDecodeFewBlocks' -test.short -test.count 1 2>&1 | tail -1) || fail "test $name"
      SPLITZIP_FATBIN=$V/decode.fatbin NOLAYER=1 bench "$D/splitzip"
      step "new kernel"
      SPLITZIP_FATBIN=$K/decode.fatbin NOLAYER=1 bench "$D/splitzip"
    done
    ;;
  trace)
    # TRACES: name:nvcc-flags (comma-separated), each built with
    # -DSZ_TRACE and timed with SPLITZIP_DECODE_TRACE=1: bench decode
    # prints the last launch's block stamps (gpu.DecodeTrace).
    for v in ${TRACES:-plain:}; do
      name=${v%%:*} flags=${v#*:}
      V=${VDIR:-/tmp}/t-$name
      step "trace $name ($flags)"
      KERNELS=decode NVCC_EXTRA="-DSZ_TRACE ${flags//,/ }" OUTDIR=$V bash scripts/build-kernels.sh >/dev/null 2>&1 || { fail "nvcc trace $name"; continue; }
      SPLITZIP_DECODE_TRACE=1 SPLITZIP_FATBIN=$V/decode.fatbin timeout 120 "$D/splitzip" bench decode --size "${SZ:-512MiB}" --runs 20 2>&1 | grep -E "^trace|normal" | cut -c1-600
    done
    ;;
  race)
    step "racecheck, ${RACE:-$K/decode.fatbin}"
    (cd gpu && SPLITZIP_FATBIN=${RACE:-$K/decode.fatbin} timeout 300 compute-sanitizer --tool racecheck --racecheck-report hazard "../$D/gpu.test" -test.run 'TestDecodeMatchesReference|TestDecodeFewBlocks' -test.short -test.count 1 2>&1 | grep -vE "^=========\s+(#|in |by )" | head -60)
    ;;
  suites)
    export SPLITZIP_FATBIN=$K/decode.fatbin
    step "2^31+5 values (SPLITZIP_LARGE)"
    (cd gpu && SPLITZIP_LARGE=1 timeout 300 "../$D/gpu.test" -test.run 'TestLarge$' -test.v -test.count 1 2>&1 | grep -E "^(--- |PASS|FAIL|ok)|_test.go:[0-9]+: " | tail -5) || fail large
    runtime_suites "$D"
    unset SPLITZIP_FATBIN
    ;;
  python)
    step "Python tests"
    SPLITZIP_FATBIN=$K/decode.fatbin SPLITZIP_BIN=$PWD/$D/splitzip SPLITZIP_LIB=$PWD/$D/libsplitzip.so \
      timeout 300 python3 -m unittest discover -s python/tests 2>&1 | tail -5 || fail python
    ;;
  ncu)
    step "ncu: fixed in place, 512 MiB"
    SPLITZIP_FATBIN=$K/decode.fatbin timeout 250 ncu --clock-control none --set full --kernel-name splitzip_decode --launch-skip 5 --launch-count 1 -o "$OUT/ncu-decode" \
      "$D/splitzip" bench decode --size 512MiB --runs 20 >/dev/null 2>"$OUT/ncu-decode.err" || fail ncu
    ncu --import "$OUT/ncu-decode.ncu-rep" --page details --print-units base 2>&1 |
      grep -E "DRAM Throughput|Duration|Achieved Occupancy|Registers Per|Block Limit|Warp Cycles Per Issued|Issue Slots Busy|Theoretical Occ|Eligible|Active Warps" | head -30
    ncu --import "$OUT/ncu-decode.ncu-rep" --page raw --print-units base 2>&1 |
      grep -E "smsp__average_warps_issue_stalled_[a-z_]+_per_issue_active.ratio" | awk '$NF+0 >= 0.05' | head -20
    ;;
  *)
    echo "unknown phase $phase"; status=2
    ;;
  esac
done
echo; echo "status $status"
exit $status
