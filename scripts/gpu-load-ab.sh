#!/usr/bin/env bash
# Loads on the H200, this build against a baseline build, one phase a call:
#   scripts/gpu-load-ab.sh D PHASE
# D holds splitzip (this build), base-splitzip (a build of the main the
# change started from), and for the tests phase gpu.test, cudaengine.test,
# transport.test, load.test and loader.test.
#   tests  every GPU suite, the engine conformance suite, memcheck
#   mix    4,000 tensors with the size mix of real models
#   moe    48 layers x 64 experts x 3 matrices (21 GB)
#   llama  an 8 GiB Llama-shaped checkpoint (llama4: 4 GiB)
#   small  20,000 tensors of 1-64 KiB
#   sweep  runtime settings (each argument after PHASE one load's flags,
#          commas for spaces), this build only, on the size mix or on what
#          SWEEP_GEN's gen flags make; SWEEP_PROFILE adds a CPU profile
#   tier   re-faults from the device tier (--device-resident) beside
#          re-faults from pinned memory, Llama 8 GiB and a 12-layer MoE
#   builds  the binaries named in BINS (files in D) alternated on a
#          12-layer MoE and the size mix, 3 rounds, with each one's
#          resident load --json (host submit time) and, for the last, a
#          CPU profile of resident re-faults into $OUT
# Each dataset phase (mix, moe, llama, small) generates the checkpoint with this
# build, compresses it with each build (a baseline may not read this
# build's index version), checks this build's load bit for bit, then
# alternates the builds for 3 rounds: bench load (raw beside SplitZip,
# first loads), bench load --resident (re-faults from pinned memory), and
# load --json for the host time per tensor, first-layer time and pinned
# bytes.
set -uo pipefail
cd "$(dirname "$0")/.."
D=$1 PHASE=$2
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/load-ab-$PHASE.log") 2>&1
status=0
fail() { echo "FAILED: $*"; status=1; }
step() { echo; echo "=== $* ($(date +%T))"; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader

dataset() { # name, gen flags...
  local name=$1; shift
  local S=/tmp/$name
  step "$name: gen $*"
  rm -rf $S /tmp/$name.base /tmp/$name.new
  "$D/splitzip" gen $S "$@" -q || { fail gen; return; }
  du -sh $S
  step "$name: compress"
  /usr/bin/time -f "base compress %e s, max RSS %M KiB" "$D/base-splitzip" compress $S -o /tmp/$name.base --no-sync -q || fail "base compress"
  /usr/bin/time -f "new compress %e s, max RSS %M KiB" "$D/splitzip" compress $S -o /tmp/$name.new --no-sync -q || fail "new compress"
  "$D/splitzip" inspect /tmp/$name.new | tail -2
  echo "object files: base $(find /tmp/$name.base/objects -type f | wc -l), new $(find /tmp/$name.new/objects -type f | wc -l)"
  cat $S/* /tmp/$name.base/objects/*/* /tmp/$name.new/objects/*/* >/dev/null
  step "$name: load --check (this build)"
  "$D/splitzip" load /tmp/$name.new --check | grep -E "matches|pinned|settings" || fail "$name load --check"
  "$D/splitzip" load /tmp/$name.new --check --resident --repeat 2 | grep -E "matches" || fail "$name resident load --check"
  for b in base-splitzip splitzip; do # the device's view, once per build
    c=/tmp/$name.new; [ $b = base-splitzip ] && c=/tmp/$name.base
    "$D/$b" load $c --device-times=true | grep -E "^load|device busy"
  done
  for r in 1 2 3; do
    for b in base-splitzip splitzip; do
      c=/tmp/$name.new; [ $b = base-splitzip ] && c=/tmp/$name.base
      step "$name round $r: $b"
      "$D/$b" bench load $c --rounds 1 --repeat 1 --device-times=false | grep compare
      "$D/$b" bench load $c --rounds 1 --resident --repeat 3 --device-times=false | grep compare
      for m in "" "--raw"; do
        "$D/$b" load $c $m --json --device-times=false > /tmp/l.json && python3 - "$b" "${m:-splitzip}" <<'PY'
import json, sys
d = json.load(open('/tmp/l.json'))
r = d['runs'][0]
dev = r.get('device', {})
print('  %s %s: %d tensors, %.2f GB/s, first load %.1f ms = %.2f us/tensor, first layer %.1f ms, pinned %d MiB, host read %.0f ms verify %.0f ms submit %.0f ms (summed), device %s' % (
    sys.argv[1], sys.argv[2], d['tensors'], r['gb_per_s'], r['wall_ns']/1e6, r['wall_ns']/1e3/d['tensors'], r['first_layer_ready_ns']/1e6,
    d['pinned_bytes']>>20, d['read_ns']/1e6, d['verify_ns']/1e6, d['submit_ns']/1e6, json.dumps(dev)))
PY
      done
    done
  done
}

case $PHASE in
tests)
  # With SPLITZIP_FATBIN (a kernel built on this machine, not yet the one
  # embedded), the stamp test is skipped: it checks the embedded one.
  skip=(); [ -n "${SPLITZIP_FATBIN:-}" ] && skip=(-test.skip TestKernelStamp)
  step "gpu"; (cd gpu && "../$D/gpu.test" -test.count=1 -test.v "${skip[@]}" 2>&1 | grep -E "^(--- |ok|FAIL|PASS)") || fail gpu
  step "engine conformance (cudaengine)"; "$D/cudaengine.test" -test.count=1 -test.v 2>&1 | grep -E "^(--- |\s+--- |ok|FAIL|PASS)" || fail cudaengine
  step "transport (all, CUDA included)"; (cd transport && "../$D/transport.test" -test.count=1 -test.v 2>&1 | grep -E "^(--- |ok|FAIL|PASS)") || fail transport
  step "load (CUDA load)"; (cd load && "../$D/load.test" -test.count=1 -test.run CUDA -test.v 2>&1 | grep -E "^(--- |ok|FAIL|PASS)") || fail load
  step "loader"; (cd loader && "../$D/loader.test" -test.count=1 -test.v 2>&1 | grep -E "^(--- |ok|FAIL|PASS)") || fail loader
  step "memcheck"
  compute-sanitizer --tool memcheck --error-exitcode 9 "$D/gpu.test" -test.short -test.run "TestDecodeStream|TestCorruptPayloads|TestScatter" -test.count=1 2>&1 | tail -1 || fail memcheck-gpu
  compute-sanitizer --tool racecheck --error-exitcode 9 "$D/gpu.test" -test.short -test.run "TestScatter" -test.count=1 2>&1 | tail -1 || fail racecheck-scatter
  compute-sanitizer --tool memcheck --error-exitcode 9 "$D/cudaengine.test" -test.count=1 2>&1 | tail -1 || fail memcheck-engine
  (cd transport && compute-sanitizer --tool memcheck --error-exitcode 9 "../$D/transport.test" -test.run CUDA -test.count=1 2>&1 | tail -1) || fail memcheck-transport
  ;;
mix) dataset mix --mix 4000 --shards 4 ;;
sweep) # runtime settings, this build only, on the size mix or, with
  # SWEEP_GEN set, on what those gen flags make
  shift 2
  "$D/splitzip" gen /tmp/mix ${SWEEP_GEN:---mix 4000 --shards 4} -q && "$D/splitzip" compress /tmp/mix -o /tmp/mix.new --no-sync -q && cat /tmp/mix/* /tmp/mix.new/objects/*/* >/dev/null
  for cfg in "$@"; do
    for r in 1 2; do
      for m in --raw ""; do
        line=$("$D/splitzip" load /tmp/mix.new $m ${cfg//,/ } | head -1)
        echo "SWEEP [$cfg] ${m:-splitzip} round $r: $(echo "$line" | grep -o '= [0-9.]* GB/s')"
      done
    done
  done
  if [ -n "${SWEEP_PROFILE:-}" ]; then
    "$D/splitzip" load /tmp/mix.new --device-times=true | grep -E "^load|device busy|summed"
    "$D/splitzip" load /tmp/mix.new --cpuprofile "$OUT/sweep-cpu.pprof" | head -1
  fi
  rm -rf /tmp/mix /tmp/mix.new ;;
tier) # the device tier: SplitZip re-faults from payloads kept in device
  # memory beside raw re-faults from pinned memory, and the resident mode
  for ds in "llama --size 8GiB --shards 4" "moe12 --moe 64 --layers 12 --shards 4"; do
    set -- $ds; name=$1; shift
    "$D/splitzip" gen /tmp/$name "$@" -q && "$D/splitzip" compress /tmp/$name -o /tmp/$name.c --no-sync -q || fail gen
    cat /tmp/$name/* /tmp/$name.c/objects/*/* >/dev/null
    "$D/splitzip" load /tmp/$name.c --device-resident --repeat 2 --check | grep -E "run|matches|tier" || fail "$name device-resident load"
    for r in 1 2; do
      echo "TIER $name r$r device: $("$D/splitzip" bench load /tmp/$name.c --rounds 1 --device-resident --repeat 3 --device-times=false | grep compare)"
      echo "TIER $name r$r pinned: $("$D/splitzip" bench load /tmp/$name.c --rounds 1 --resident --repeat 3 --device-times=false | grep compare)"
    done
    rm -rf /tmp/$name /tmp/$name.c
  done ;;
builds)
  for ds in "moe12 --moe 64 --layers 12 --shards 4" "mix --mix 4000 --shards 4"; do
    set -- $ds; name=$1; shift
    "$D/splitzip" gen /tmp/$name "$@" -q && "$D/splitzip" compress /tmp/$name -o /tmp/$name.c --no-sync -q || fail gen
    cat /tmp/$name/* /tmp/$name.c/objects/*/* >/dev/null
    for r in 1 2 3; do
      for b in $BINS; do
        echo "BUILDS $name r$r $b first:    $("$D/$b" bench load /tmp/$name.c --rounds 1 --repeat 1 --device-times=false | grep compare)"
        echo "BUILDS $name r$r $b resident: $("$D/$b" bench load /tmp/$name.c --rounds 1 --resident --repeat 3 --device-times=false | grep compare)"
      done
    done
    for b in $BINS; do
      for m in "" --raw; do
        "$D/$b" load /tmp/$name.c $m --resident --repeat 3 --json --device-times=false | python3 -c "import json,sys; d=json.load(sys.stdin); print('  $b ${m:-splitzip} resident json: ' + ', '.join('%.1f GB/s' % r['gb_per_s'] for r in d['runs']) + '; submit %.0f ms summed' % (d['submit_ns']/1e6))"
      done
      last=$b
    done
    "$D/$last" load /tmp/$name.c --resident --repeat 6 --cpuprofile "$OUT/$name-$last-resident.pprof" | grep "^load" | tail -1
    rm -rf /tmp/$name /tmp/$name.c
  done ;;
moe) dataset moe --moe 64 --shards 8; rm -rf /tmp/moe /tmp/moe.base /tmp/moe.new ;;
llama) dataset llama --size 8GiB --shards 4 ;;
llama4) dataset llama4 --size 4GiB --shards 2; rm -rf /tmp/llama4 /tmp/llama4.base /tmp/llama4.new ;;
small) dataset small --small 20000 --shards 4; rm -rf /tmp/small /tmp/small.base /tmp/small.new ;;
*) echo "unknown phase $PHASE"; exit 2 ;;
esac
echo "gpu-load-ab $PHASE status: $status"
exit $status
