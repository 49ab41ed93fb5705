#!/usr/bin/env bash
# Entropy kernel changes on the H200, against a baseline binary, in one
# call: scripts/gpu-entropy-ab.sh D BASE PHASES..., with D holding
# splitzip and gpu.test built from the working tree and BASE a splitzip
# built from the baseline commit (its embedded kernels). Without a build
# phase, the later phases use the kernel D's binaries embed.
#   build   nvcc the working tree's kernels into $OUT/kernels (registers
#           and spills in the log); later phases use its entropy.fatbin
#   check   the entropy GPU tests with it, then memcheck and racecheck
#           on the reference and corrupt-payload tests (short)
#   ab      bench decode --codec entropy, ROUNDS (default 2) rounds
#           alternating BASE and the new kernel, DT (default
#           BF16,F8_E4M3,F32,F16) at SZ (default 64MiB,512MiB)
#   python  the Python tests (D holds libsplitzip.so too)
#   few     the new kernel on BF16_FEW (payloads of pair symbols), which
#           builds before version 3 do not make
#   scratch the new kernel with SPLITZIP_ENTROPY_SCRATCH at each of
#           CAPS (default 16 and 32 MiB), BF16
#   suites  with it: the entropy test of 2^31+3 values, the engine
#           conformance suite, the transport CUDA tests and the loader
#   ncu     Nsight Compute (--set full, --clock-control none) of one
#           in-place launch of NCU_DT (default BF16; the pair kernel for
#           BF16_FEW) with the new kernel (the embedded one without a
#           build phase) at NCU_SZ (default 64 and 512 MiB), the launch
#           after NCU_SKIP (default 5; at 512 MiB F8_E4M3's whole-byte
#           field starts at 42, after its exponent field's 2 x 21):
#           throughput, occupancy and the stall reasons (warps a cycle
#           an instruction issues), reports in $OUT
#   cpu     one core of the host (taskset, -test.cpu 1), ROUNDS rounds:
#           BenchmarkPayloadDTypes of D/entropy.test and
#           BenchmarkHuff0Decode of D/entstudy.test (huff0 on the same
#           symbols), MB/s of raw bytes; with D/crc32c.test, the
#           CRC-32C folding beside hash/crc32 and which one the pick keeps
#   variants each of VARIANTS (name:nvcc-flags, space-separated, e.g.
#           "t1024:-DEZ_MAX_THREADS=1024") built into $OUT/v-name, its
#           registers logged, checked by the reference test and timed for
#           DT (default BF16) beside the new kernel
set -uo pipefail
cd "$(dirname "$0")/.."
. scripts/gpu-lib.sh
ab_setup entropy-ab.log "$@"
shift 2
# kern: the build phase's entropy.fatbin, or nothing (the embedded kernel)
# when no build phase ran.
kern() { [ -f "$K/entropy.fatbin" ] && echo "$K/entropy.fatbin"; }
bench() { "$@" bench decode --codec entropy --dtype "${DT:-BF16,F8_E4M3,F32,F16}" --size "${SZ:-64MiB,512MiB}" --runs 30 | grep -E "place|copy"; }
for phase in "$@"; do
  case $phase in
  build)
    step "nvcc"
    OUTDIR=$K bash scripts/build-kernels.sh 2>&1 | grep -E -A2 "entropy_decode' for 'sm_90|^built" || fail nvcc
    ;;
  check)
    export SPLITZIP_ENTROPY_FATBIN=$(kern)
    step "entropy GPU tests"
    (cd gpu && timeout 300 "../$D/gpu.test" -test.run 'Entropy|DecodeStream' -test.skip TestKernelStamp -test.v -test.count 1 2>&1 | grep -E "^(--- |PASS|FAIL|ok)|entropy_test.go:[0-9]+: " | tail -30) || fail tests
    for tool in memcheck racecheck; do
      step "compute-sanitizer $tool"
      (cd gpu && timeout 300 compute-sanitizer --tool $tool --error-exitcode 9 "../$D/gpu.test" -test.run 'TestEntropyMatchesReference|TestEntropyCorruptPayloads' -test.short -test.count 1 2>&1 | tail -4) || fail $tool
    done
    unset SPLITZIP_ENTROPY_FATBIN
    ;;
  ab)
    for r in $(seq 1 "${ROUNDS:-2}"); do
      step "round $r: baseline"
      bench "$BASE"
      step "round $r: new"
      SPLITZIP_ENTROPY_FATBIN=$(kern) bench "$D/splitzip"
    done
    ;;
  few)
    step "pair payloads (BF16_FEW), new kernel only"
    SPLITZIP_ENTROPY_FATBIN=$(kern) DT=BF16_FEW bench "$D/splitzip"
    ;;
  python)
    step "Python tests"
    SPLITZIP_ENTROPY_FATBIN=$(kern) SPLITZIP_BIN=$PWD/$D/splitzip SPLITZIP_LIB=$PWD/$D/libsplitzip.so \
      timeout 300 python3 -m unittest discover -s python/tests 2>&1 | tail -5 || fail python
    ;;
  scratch)
    for cap in ${CAPS:-16777216 33554432}; do
      step "scratch cap $cap"
      SPLITZIP_ENTROPY_SCRATCH=$cap SPLITZIP_ENTROPY_FATBIN=$K/entropy.fatbin DT=BF16 bench "$D/splitzip"
    done
    ;;
  suites)
    export SPLITZIP_ENTROPY_FATBIN=$(kern)
    step "TestEntropyLarge"
    (cd gpu && SPLITZIP_LARGE=1 timeout 300 "../$D/gpu.test" -test.run 'TestEntropyLarge' -test.v -test.count 1 2>&1 | grep -E "^(--- |PASS|FAIL|ok)|entropy_test.go:[0-9]+: " | tail -5) || fail large
    runtime_suites "$D"
    unset SPLITZIP_ENTROPY_FATBIN
    ;;
  ncu)
    ndt=${NCU_DT:-BF16} kn=splitzip_entropy_decode
    [ "$ndt" = BF16_FEW ] && kn=splitzip_entropy_decode_pairs
    for sz in ${NCU_SZ:-64MiB 512MiB}; do
      step "ncu: entropy $ndt in place, $sz, launch ${NCU_SKIP:-5}"
      SPLITZIP_ENTROPY_FATBIN=$(kern) timeout 250 ncu --clock-control none --set full --kernel-name $kn --launch-skip ${NCU_SKIP:-5} --launch-count 1 -o "$OUT/ncu-entropy-$ndt-$sz" \
        "$D/splitzip" bench decode --codec entropy --dtype $ndt --size $sz --runs 20 >/dev/null 2>"$OUT/ncu-entropy-$ndt-$sz.err" || fail "ncu $sz"
      ncu --import "$OUT/ncu-entropy-$ndt-$sz.ncu-rep" --page details --print-units base 2>&1 |
        grep -E "DRAM Throughput|Duration|Achieved Occupancy|Registers Per|Block Limit|Warp Cycles Per Issued|Issue Slots Busy|Issued Ipc|L2 Hit|L1/TEX Hit|Shared Memory|Bank|Theoretical Occ|Eligible|Active Warps|Executed Instructions  " | head -40
      ncu --import "$OUT/ncu-entropy-$ndt-$sz.ncu-rep" --page raw --print-units base 2>&1 |
        grep -E "smsp__average_warps_issue_stalled_[a-z_]+_per_issue_active.ratio|l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_(ld|st).sum |smsp__inst_executed.sum " | awk '$NF+0 >= 0.05 || /bank|inst_executed/' | head -30
    done
    ;;
  cpu)
    for r in $(seq 1 "${ROUNDS:-2}"); do
      step "round $r: one core, entropy payloads, then huff0"
      taskset -c 3 "$D/entropy.test" -test.run XXX -test.bench PayloadDTypes -test.cpu 1 -test.benchtime 20x 2>&1 | grep -E "^Benchmark|^cpu"
      taskset -c 3 "$D/entstudy.test" -test.run XXX -test.bench Huff0Decode -test.cpu 1 -test.benchtime 20x 2>&1 | grep -E "^Benchmark"
      [ -x "$D/crc32c.test" ] && taskset -c 3 "$D/crc32c.test" -test.run TestPick -test.v -test.bench Update -test.cpu 1 -test.benchtime 50x 2>&1 | grep -E "^Benchmark|chosen"
    done
    ;;
  variants)
    for v in ${VARIANTS:-}; do
      name=${v%%:*} flags=${v#*:}
      V=$OUT/v-$name
      step "variant $name ($flags)"
      KERNELS=entropy NVCC_EXTRA="${flags//,/ }" OUTDIR=$V bash scripts/build-kernels.sh 2>&1 | grep -A1 "entropy_decode' for 'sm_90" | tail -1 || { fail "nvcc $name"; continue; }
      (cd gpu && SPLITZIP_ENTROPY_FATBIN=$V/entropy.fatbin timeout 120 "../$D/gpu.test" -test.run 'TestEntropyMatchesReference' -test.short -test.count 1 2>&1 | tail -1) || fail "test $name"
      SPLITZIP_ENTROPY_FATBIN=$V/entropy.fatbin DT=${DT:-BF16} bench "$D/splitzip"
      step "new kernel"
      SPLITZIP_ENTROPY_FATBIN=$K/entropy.fatbin DT=${DT:-BF16} bench "$D/splitzip"
    done
    ;;
  *)
    echo "unknown phase $phase"; status=2
    ;;
  esac
done
echo; echo "status $status"
exit $status
