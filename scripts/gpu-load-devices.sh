#!/usr/bin/env bash
# Loads onto several GPUs (load --devices; the issue 14 work) on the GPU
# machine: scripts/gpu-load-devices.sh D PHASE, with D
# holding splitzip and cudaengine.test built here.
#   one    one GPU: the engine conformance suite (its PeerCopy case: two
#          engines on GPU 0), then load --devices 0,0 --check, by parts
#          with peer copies and with each engine loading everything
#   multi  every GPU of the machine (nvidia-smi -L), a SIZE (default
#          16GiB) Llama-shaped checkpoint from page cache, 3 rounds
#          alternating: N processes each loading it raw on its own GPU
#          (issue 14's baseline, wall from start to the last done), load
#          --devices with peer copies, SplitZip and raw, and without
#          (--peer=false); --check once each
set -uo pipefail
cd "$(dirname "$0")/.."
D=$1 PHASE=$2
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/load-devices-$PHASE.log") 2>&1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
status=0
fail() { echo "FAILED: $*"; status=1; }
step() { echo; echo "=== $* ($(date +%T))"; }
nvidia-smi -L
case $PHASE in
one)
  step "engine conformance (PeerCopy: two engines on GPU 0)"
  timeout 120 "$D/cudaengine.test" -test.run TestConformance -test.v -test.count 1 2>&1 | grep -E "^(--- |PASS|FAIL|ok)|^    --- " || fail conformance
  step "load --devices 0,0"
  "$D/splitzip" gen /tmp/dv --size 1GiB --shards 2 -q && "$D/splitzip" compress /tmp/dv -o /tmp/dv.sz -q --no-sync || fail gen
  for peer in true false; do
    timeout 120 "$D/splitzip" load /tmp/dv.sz --devices 0,0 --peer=$peer --check || fail "devices 0,0 peer $peer"
  done
  ;;
multi)
  N=$(nvidia-smi -L | wc -l)
  DEVS=$(seq -s, 0 $((N - 1)))
  step "$N GPUs ($DEVS): gen ${SIZE:-16GiB}"
  "$D/splitzip" gen /tmp/big --size "${SIZE:-16GiB}" --shards 8 -q && "$D/splitzip" compress /tmp/big -o /tmp/big.sz -q --no-sync || fail gen
  cat /tmp/big/* /tmp/big.sz/objects/*/* >/dev/null
  for peer in true false; do
    "$D/splitzip" load /tmp/big.sz --devices "$DEVS" --peer=$peer --check | tail -1 || fail "check peer $peer"
  done
  for r in 1 2 3; do
    step "round $r: $N processes, raw, one GPU each"
    t0=$(date +%s.%N)
    for d in $(seq 0 $((N - 1))); do "$D/splitzip" load /tmp/big.sz --raw --device $d > "$OUT/raw-$r-$d.log" 2>&1 & done
    wait
    echo "wall $(echo "$(date +%s.%N) - $t0" | bc) s (process start to the last done, setup included)"
    grep -h "^load" "$OUT"/raw-$r-*.log # each process's own load wall, setup excluded
    for raw in "" "--raw"; do
      for peer in true false; do
        step "round $r: load --devices $DEVS --peer=$peer $raw"
        "$D/splitzip" load /tmp/big.sz --devices "$DEVS" --peer=$peer $raw | head -1 || fail "devices peer $peer $raw"
      done
    done
  done
  ;;
*)
  echo "unknown phase $PHASE"; exit 2
  ;;
esac
echo; echo "status $status"
