#!/usr/bin/env bash
# Re-measures the GPU rows of docs/PERF.md's current table on the H200,
# this build (D/splitzip) beside a baseline (D/base-splitzip, a build of
# the main the change started from), alternating in the same call:
#   scripts/gpu-perf-table.sh D PHASES...
#   decode   bench decode, fixed-rate (512, 64, 16 and 1 MiB, in place and
#            out; a Llama-3-8B layer in one scatter launch) and entropy
#            (BF16 512 and 64 MiB; F16, F32, F8_E4M3, F8_E5M2 at 512 MiB),
#            ROUNDS rounds (default 2); bench h2d once
#   llama4   a 4 GiB Llama-shaped checkpoint, fixed and entropy caches of
#            each build: first loads from page cache and pinned-resident
#            re-faults (3 rounds), then cold loads (page cache dropped),
#            source present, and entropy with the source moved away
#   llama, mix, moe, small   scripts/gpu-load-ab.sh D PHASE: an 8 GiB
#            Llama, the size mix of real models, 48 layers x 64 experts,
#            20,000 tensors of 1-64 KiB (first loads, re-faults, host
#            microseconds a tensor)
#   realweights  the real-weights checkpoints (scripts/real-weights.sh;
#            RW names the folder holding them, default /tmp/rw), fixed and
#            entropy caches of each build: verify --gpu, then bench load
#            --rounds 3, 2 rounds
#   torch    splitzip.torch.load_file against safetensors.torch.load_file,
#            8 GiB (scripts/gpu-torch.py), this build's libsplitzip.so
#   offload  forwards of a 0.9 B Llama offloaded through each tier and
#            through accelerate (scripts/gpu-offload.py), this build
#   offload8b  the same for a Llama-3-8B shape (scripts/gpu-offload-8b.py)
# A baseline may not read this build's caches: each build compresses its
# own. Logs go to $OUT/perf-PHASE.log (gpu-load-ab.sh's to
# $OUT/load-ab-PHASE.log).
set -uo pipefail
cd "$(dirname "$0")/.."
D=$1
shift
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
status=0
fail() { echo "FAILED: $*"; status=1; }
step() { echo; echo "=== $* ($(date +%T))"; }
builds=${BUILDS:-"base-splitzip splitzip"}
rate() { python3 -c 'import json,sys; r=json.load(sys.stdin); g=[x["gb_per_s"] for x in r["runs"]]; print("first %.1f GB/s, re-faults %s" % (g[0], " ".join("%.1f" % v for v in g[1:])))'; }
exec 3>&1 4>&2
for phase in "$@"; do
  exec > >(tee -a "$OUT/perf-$phase.log" >&3) 2>&1
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  case $phase in
  decode)
    for r in $(seq 1 "${ROUNDS:-2}"); do
      for b in $builds; do
        step "round $r: $b fixed"
        timeout 150 "$D/$b" bench decode --size 512MiB,64MiB,16MiB,1MiB --runs 30 | grep -E "normal|copy" | cut -c1-160 || fail "$b decode"
        timeout 100 "$D/$b" bench decode --layer --runs 30 | grep -E "layer|launch" | cut -c1-160 || fail "$b layer"
        step "round $r: $b entropy"
        timeout 150 "$D/$b" bench decode --codec entropy --size 512MiB,64MiB --runs 30 | grep -vE "^\s*$" | cut -c1-160 || fail "$b entropy"
      done
    done
    for b in $builds; do
      step "$b entropy, other dtypes"
      timeout 200 "$D/$b" bench decode --codec entropy --dtype F16,F32,F8_E4M3,F8_E5M2 --size 512MiB --runs 20 | grep -vE "^\s*$" | cut -c1-160 || fail "$b entropy dtypes"
    done
    step "h2d"
    timeout 60 "$D/splitzip" bench h2d | cut -c1-160 || fail h2d
    ;;
  llama4)
    S=/tmp/l4
    rm -rf $S $S.gone $S.*
    step "gen 4 GiB and compress with each build"
    "$D/splitzip" gen $S --size 4GiB --shards 4 -q || fail gen
    for b in $builds; do
      for c in fixed entropy; do
        "$D/$b" compress $S -o $S.$b.$c --codec $c --no-sync -q --self-contained || fail "$b compress $c"
      done
    done
    du -sb $S $S.splitzip.fixed/objects $S.splitzip.entropy/objects
    "$D/splitzip" load $S.splitzip.fixed --check | grep -E "matches" || fail "load --check fixed"
    "$D/splitzip" load $S.splitzip.entropy --check | grep -E "matches" || fail "load --check entropy"
    cat $S/* $S.*/objects/*/* > /dev/null 2>&1
    for r in 1 2 3; do
      for b in $builds; do
        echo "r$r $b raw:         $("$D/$b" load $S.$b.fixed --raw --json | rate)"
        echo "r$r $b fixed:       $("$D/$b" load $S.$b.fixed --json | rate)"
        echo "r$r $b entropy:     $("$D/$b" load $S.$b.entropy --json | rate)"
        echo "r$r $b raw res:     $("$D/$b" load $S.$b.fixed --raw --resident --repeat 4 --json | rate)"
        echo "r$r $b fixed res:   $("$D/$b" load $S.$b.fixed --resident --repeat 4 --json | rate)"
        echo "r$r $b entropy res: $("$D/$b" load $S.$b.entropy --resident --repeat 4 --json | rate)"
      done
    done
    step "cold, source present"
    for b in $builds; do
      for c in raw fixed entropy; do
        sync; echo 3 > /proc/sys/vm/drop_caches
        case $c in
        raw) echo "cold $b raw:     $("$D/$b" load $S.$b.fixed --raw --json | rate)" ;;
        *) echo "cold $b $c: $("$D/$b" load $S.$b.$c --json | rate)" ;;
        esac
      done
    done
    mv $S $S.gone
    step "entropy, source gone"
    for b in $builds; do
      sync; echo 3 > /proc/sys/vm/drop_caches
      echo "cold $b entropy, no source: $("$D/$b" load $S.$b.entropy --json | rate)"
      echo "warm $b entropy, no source: $("$D/$b" load $S.$b.entropy --json | rate)"
    done
    rm -rf $S.gone $S.*
    ;;
  llama|mix|moe|small)
    OUT=$OUT bash scripts/gpu-load-ab.sh "$D" "$phase" || fail "$phase"
    ;;
  realweights)
    RW=${RW:-/tmp/rw}
    for c in "$RW"/*/; do
      c=$(basename "$c")
      for b in $builds; do
        for codec in fixed entropy; do
          C=/tmp/rwc.$b.$codec.$c
          rm -rf "$C"
          "$D/$b" compress "$RW/$c" -o "$C" --codec $codec --no-sync -q >/dev/null || fail "$b compress $codec $c"
          [ "$b" != base-splitzip ] && { "$D/$b" verify "$C" --gpu -q || fail "verify --gpu $codec $c"; }
        done
      done
      for round in 1 2; do
        for b in $builds; do
          for codec in fixed entropy; do
            step "$c $b $codec round $round"
            "$D/$b" bench load /tmp/rwc.$b.$codec.$c --rounds 3 | grep -vE "^\s*(settings|summed|moved)" || fail "$b bench load $codec $c"
          done
        done
      done
      rm -rf /tmp/rwc.*."$c"
    done
    ;;
  torch)
    S=/tmp/t8
    [ -d $S ] || "$D/splitzip" gen $S --size 8GiB --shards 4 -q || fail gen
    "$D/splitzip" compress $S -o $S.c --no-sync -q || fail compress
    SPLITZIP_BIN=$D/splitzip SPLITZIP_LIB=$D/libsplitzip.so timeout 300 python3 scripts/gpu-torch.py $S $S.c || fail torch
    rm -rf $S $S.c
    ;;
  offload)
    SPLITZIP_LIB=$D/libsplitzip.so timeout 400 python3 scripts/gpu-offload.py "$D/splitzip" /tmp/offload 2>&1 | sed 's/.*\r//' | grep -v "^Loading weights" || fail offload
    ;;
  offload8b)
    SPLITZIP_LIB=$D/libsplitzip.so timeout 560 python3 scripts/gpu-offload-8b.py "$D/splitzip" /tmp/offload8b 2>&1 | sed 's/.*\r//' | grep -v "^Loading weights" || fail offload8b
    ;;
  *)
    echo "unknown phase $phase"; exit 2 ;;
  esac
done
exit $status
