#!/usr/bin/env bash
# Kernel development on the H200: build the kernels with nvcc into
# $OUT/kernels, run the entropy GPU tests (short) with the new entropy
# kernel, and time it at SZ (default 64MiB) for DT (default BF16,F8_E4M3).
# D (default .dev/g12) holds splitzip and gpu.test.
set -uo pipefail
cd "$(dirname "$0")/.."
D=${D:-.dev/g12}
K=$OUT/kernels
OUTDIR=$K bash scripts/build-kernels.sh 2>&1 | grep -A2 "entropy_decode' for 'sm_90"
export SPLITZIP_ENTROPY_FATBIN=$K/entropy.fatbin
timeout 200 "$D/gpu.test" -test.run 'Entropy' -test.short -test.skip TestKernelStamp -test.count 1 2>&1 | tail -4
"$D/splitzip" bench decode --codec entropy --dtype "${DT:-BF16,F8_E4M3}" --size "${SZ:-64MiB}" --runs 20
if [ -n "${NCU:-}" ]; then
  timeout 200 ncu --clock-control none -k splitzip_entropy_decode -c 1 --section WarpStateStats --section InstructionStats --section Occupancy --metrics smsp__inst_executed.sum,smsp__pcsamp_warps_issue_stalled_short_scoreboard,smsp__pcsamp_warps_issue_stalled_long_scoreboard,smsp__pcsamp_warps_issue_stalled_wait,smsp__pcsamp_warps_issue_stalled_mio_throttle,smsp__pcsamp_warps_issue_stalled_lg_throttle,smsp__pcsamp_warps_issue_stalled_barrier,smsp__pcsamp_warps_issue_stalled_membar,smsp__pcsamp_warps_issue_stalled_math_pipe_throttle,smsp__pcsamp_warps_issue_stalled_not_selected,smsp__pcsamp_warps_issue_stalled_selected,smsp__pcsamp_warps_issue_stalled_branch_resolving,smsp__pcsamp_warps_issue_stalled_dispatch_stall,smsp__pcsamp_warps_issue_stalled_no_instructions,smsp__pcsamp_warps_issue_stalled_sleeping \
    "$D/splitzip" bench decode --codec entropy --dtype BF16 --size 64MiB --runs 20 2>&1 | grep -vE "^==PROF|^    -+|OPT|^          " | tail -60
fi
