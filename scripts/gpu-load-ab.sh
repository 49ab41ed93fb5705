#!/usr/bin/env bash
# Loads on the H200, this build against a baseline build (the issue 11
# work), one phase a call:  scripts/gpu-load-ab.sh D PHASE
# D holds splitzip (this build), base-splitzip (the session's starting
# main), and for the tests phase gpu.test, cudaengine.test,
# transport.test, load.test and loader.test.
#   tests  every GPU suite, the engine conformance suite, memcheck
#   mix    4,000 tensors with the size mix of real models
#   moe    48 layers x 64 experts x 3 matrices (21 GB)
#   llama  an 8 GiB Llama-shaped checkpoint
#   quick  the conformance suite, then base against this build on the
#          size mix and a 12-layer MoE, 3 rounds
#   packsweep  load-time pack thresholds (--small-bytes) on the mix and a
#          12-layer MoE, this build only
#   tier   re-faults from the device tier (--device-resident) beside
#          re-faults from pinned memory, Llama 8 GiB and a 12-layer MoE
#   cpu    the entropy coder's benchmarks on the host cores (entropy.test)
#   entropy  entropy payloads loaded from the source and, with it gone,
#          decoded on the host, beside fixed-rate payloads
#   streams  decode streams (thirteenth session): the conformance suite,
#          and with NOWAIT_TEST set a build whose decodes skip their wait
#          (its DecodesFollowTheirCopies must fail); then base against
#          this build on a 12-layer MoE, the size mix and an 8 GiB Llama
#          with the upload stream counts in STREAMS (default "1 2 4"),
#          first loads and resident re-faults, 3 rounds
#   batch  batched copies (thirteenth session): the conformance suite,
#          the batched-submission test and the transport CUDA tests, then
#          base against this build on a 12-layer MoE, the size mix and an
#          8 GiB Llama, first loads and resident re-faults, 3 rounds
#   packs  resident packs and runs (--resident-packs, the default since
#          the fourteenth session): suites, then on a 12-layer MoE, the size mix
#          and an 8 GiB Llama, bit-for-bit resident loads with packs (raw
#          and SplitZip), and 3 rounds of resident re-faults: the baseline,
#          this build without packs and with them
#   first  first loads of the builds in BINS on a 12-layer MoE, ROUNDS
#          rounds (default 3), with their host read and verify times,
#          and the CRC tests and benchmarks
#   builds  the binaries named in BINS (files in D) alternated on a
#          12-layer MoE and the size mix, 3 rounds, with each one's
#          resident load --json (host submit time) and, for the last, a
#          CPU profile of resident re-faults into $OUT
# Each dataset phase generates the checkpoint with this build, compresses
# it with each build (the baseline writes index version 1, this build 2),
# checks this build's load bit for bit, then alternates the builds for 3
# rounds: bench load (raw beside SplitZip, first loads), bench load
# --resident (re-faults from pinned memory), and load --json for the host
# time per tensor, first-layer time and pinned bytes.
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

# suites: the engine conformance suite (and the batched-submission test)
# and the transport CUDA tests of this build.
suites() {
  step "engine conformance (cudaengine)"; "$D/cudaengine.test" -test.count=1 -test.v 2>&1 | grep -E "^(--- |\s+--- |ok|FAIL|PASS)" | grep -vE "PASS: TestConformance/[A-Za-z]+/" || fail cudaengine
  step "transport CUDA"; (cd transport && "../$D/transport.test" -test.count=1 -test.run CUDA -test.v 2>&1 | grep -E "^(--- |ok|FAIL|PASS)") || fail transport
}

# prepare NAME GEN-FLAGS...: generates /tmp/NAME, compresses it with each
# build (/tmp/NAME.base, /tmp/NAME.new), reads it all into the page cache
# and checks this build's load bit for bit.
prepare() {
  local name=$1; shift
  "$D/splitzip" gen /tmp/$name "$@" -q || { fail gen; return 1; }
  for b in base new; do bin=splitzip; [ $b = base ] && bin=base-splitzip
    "$D/$bin" compress /tmp/$name -o /tmp/$name.$b --no-sync -q || { fail compress; return 1; }; done
  cat /tmp/$name/* /tmp/$name.*/objects/*/* >/dev/null
  "$D/splitzip" load /tmp/$name.new --check | grep -E "matches" || fail "$name load --check"
}

# ab LABEL NAME [LOAD-FLAGS...]: 3 rounds alternating the builds, each a
# first load from page cache and resident re-faults, raw beside SplitZip.
ab() {
  local label=$1 name=$2; shift 2
  for r in 1 2 3; do
    for b in base new; do bin=splitzip; [ $b = base ] && bin=base-splitzip
      echo "$label $name r$r $b first:    $("$D/$bin" bench load /tmp/$name.$b --rounds 1 --repeat 1 --device-times=false "$@" | grep compare)"
      echo "$label $name r$r $b resident: $("$D/$bin" bench load /tmp/$name.$b --rounds 1 --resident --repeat 3 --device-times=false "$@" | grep compare)"
    done
  done
}

# devtimes NAME: each build's device times of resident re-faults, and its
# host time per tensor, first layer and pinned bytes of a first load.
devtimes() {
  local name=$1
  for b in base new; do bin=splitzip; [ $b = base ] && bin=base-splitzip
    "$D/$bin" load /tmp/$name.$b --resident --repeat 3 --device-times=true | grep -E "^load|device busy" | tail -2
    "$D/$bin" load /tmp/$name.$b --json --device-times=false | python3 -c "import json,sys; d=json.load(sys.stdin); r=d['runs'][0]; print('  $b json: %.1f GB/s, %.2f us/tensor, first layer %.1f ms, pinned %d MiB' % (r['gb_per_s'], r['wall_ns']/1e3/d['tensors'], r['first_layer_ready_ns']/1e6, d['pinned_bytes']>>20))"
  done
}

# over_datasets FN: the 12-layer MoE, the size mix and the 8 GiB Llama
# in turn, each prepared, then FN NAME, then removed.
over_datasets() {
  local fn=$1
  for ds in "moe12 --moe 64 --layers 12 --shards 4" "mix --mix 4000 --shards 4" "llama --size 8GiB --shards 4"; do
    set -- $ds
    prepare "$@" && "$fn" $1
    rm -rf /tmp/$1 /tmp/$1.*
  done
}

# streams_one NAME: for each upload stream count in STREAMS (default
# "1 2 4"), a resident load checked, then ab; then device times.
streams_one() {
  local name=$1
  for st in ${STREAMS:-1 2 4}; do
    "$D/splitzip" load /tmp/$name.new --check --resident --repeat 2 --streams $st | grep -E "matches" || fail "$name resident load --check --streams $st"
    ab "STREAMS s$st" $name --streams $st
  done
  devtimes $name
}

# batch_one NAME: resident loads checked, then ab and device times.
batch_one() {
  local name=$1
  "$D/splitzip" load /tmp/$name.new --check --resident --repeat 2 | grep -E "matches" || fail "$name resident load --check"
  "$D/splitzip" load /tmp/$name.new --check --raw --resident --repeat 2 | grep -E "matches" || fail "$name raw resident load --check"
  ab BATCH $name
  devtimes $name
}

# packs_one NAME: resident loads with packs (runs for raw) checked, then
# 3 rounds of resident re-faults: the baseline, this build without packs
# and with them; then this build's device times with them.
packs_one() {
  local name=$1
  for m in "" --raw; do
    "$D/splitzip" load /tmp/$name.new $m --check --resident --repeat 3 | grep -E "^load|matches" || fail "$name ${m:-splitzip} resident packs load --check"
  done
  for r in 1 2 3; do
    echo "PACKS $name r$r base:      $("$D/base-splitzip" bench load /tmp/$name.base --rounds 1 --resident --repeat 3 --device-times=false | grep compare)"
    echo "PACKS $name r$r new:       $("$D/splitzip" bench load /tmp/$name.new --rounds 1 --resident --resident-packs=false --repeat 3 --device-times=false | grep compare)"
    echo "PACKS $name r$r new packs: $("$D/splitzip" bench load /tmp/$name.new --rounds 1 --resident --repeat 3 --device-times=false | grep compare)"
  done
  for m in "" --raw; do
    "$D/splitzip" load /tmp/$name.new $m --resident --repeat 3 --device-times=true | grep -E "^load|device busy" | tail -2
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
quick) # conformance, then base against new on the mix and a 12-layer MoE
  suites
  for ds in "mix --mix 4000 --shards 4" "moe12 --moe 64 --layers 12 --shards 4"; do
    set -- $ds; prepare "$@" && ab QUICK $1
    rm -rf /tmp/$1 /tmp/$1.*
  done ;;
packsweep) # the pack threshold at load time (--small-bytes) on the mix
  # and a 12-layer MoE, now that the scatter kernel is persistent and
  # pipelined (2026-12-01, fifth session): this build only, 3 rounds
  for ds in "mix --mix 4000 --shards 4" "moe12 --moe 64 --layers 12 --shards 4"; do
    set -- $ds; name=$1; shift
    "$D/splitzip" gen /tmp/$name "$@" -q || fail gen
    "$D/splitzip" compress /tmp/$name -o /tmp/$name.new --no-sync -q || fail compress
    cat /tmp/$name/* /tmp/$name.new/objects/*/* >/dev/null
    for r in 1 2 3; do
      for sb in 0 524288 1048576 2097088; do
        echo "PACK $name r$r small-bytes $sb: $("$D/splitzip" bench load /tmp/$name.new --rounds 1 --repeat 1 --small-bytes $sb --device-times=false | grep compare)"
      done
    done
    "$D/splitzip" load /tmp/$name.new --check --small-bytes 2097088 | grep -E "matches" || fail "$name load --check"
    rm -rf /tmp/$name /tmp/$name.*
  done ;;
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
cpu) # the entropy coder's CPU speed on the GPU machine's host cores
  # (entropy.test from `make gpu-build`), one goroutine, 5 runs each
  "$D/entropy.test" -test.run XXX -test.bench 'EncodePayload|DecodePayload|DecodeChunk' -test.benchtime 2s -test.count 5 -test.cpu 1 || fail entropy-bench ;;
entropy) # entropy payloads on the GPU: read from the source, and decoded
  # on the host with the source gone, beside fixed-rate payloads and raw
  "$D/splitzip" gen /tmp/ent --size 2GiB --shards 2 -q || fail gen
  "$D/splitzip" compress /tmp/ent -o /tmp/ent.fixed --no-sync -q --self-contained || fail compress
  "$D/splitzip" compress /tmp/ent -o /tmp/ent.entropy --codec entropy --no-sync -q --self-contained || fail compress
  cat /tmp/ent/* /tmp/ent.*/objects/*/* >/dev/null
  for r in 1 2; do
    for c in fixed entropy; do
      echo "ENTROPY r$r $c, source there: $("$D/splitzip" load /tmp/ent.$c | head -1 | grep -o '= [0-9.]* GB/s')"
      echo "ENTROPY r$r $c, raw path: $("$D/splitzip" load /tmp/ent.$c --raw | head -1 | grep -o '= [0-9.]* GB/s')"
    done
  done
  mv /tmp/ent /tmp/ent.gone
  "$D/splitzip" load /tmp/ent.entropy --check | grep -E "^load|matches" || fail "entropy load without source"
  for r in 1 2; do
    for c in fixed entropy; do
      echo "ENTROPY r$r $c, source gone: $("$D/splitzip" load /tmp/ent.$c | head -1 | grep -o '= [0-9.]* GB/s')"
    done
  done
  rm -rf /tmp/ent.gone /tmp/ent.fixed /tmp/ent.entropy ;;
streams)
  suites
  if [ -n "${NOWAIT_TEST:-}" ]; then
    step "decodes that skip their wait (must fail)"
    for k in 1 2 3; do "$NOWAIT_TEST" -test.count=1 -test.run 'Conformance/DecodesFollowTheirCopies' 2>&1 | grep -E "^\s*--- |decode did not|^ok|^FAIL" | head -4; done
  fi
  over_datasets streams_one ;;
batch) suites; over_datasets batch_one ;;
packs) suites; over_datasets packs_one ;;
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
first) # the CRC test and benchmark (crc32c.test, where D has it) and the
  # processor's flags; then first loads from page cache of the builds in
  # BINS (files in D), each checked bit for bit once, alternated on a
  # 12-layer MoE, 3 rounds, each with its host read and verify times
  grep -o -w -E "avx512f|vpclmulqdq|pclmulqdq|sse4_2|avx2" /proc/cpuinfo | sort | uniq -c
  if [ -x "$D/crc32c.test" ]; then
    "$D/crc32c.test" -test.run "TestUpdate|TestPick" -test.v -test.bench Update -test.benchtime 1s -test.count 3 2>&1 | grep -E "Benchmark|chosen|PASS|FAIL|wide|ok" || fail crc32c
  fi
  "$D/splitzip" gen /tmp/moe12 --moe 64 --layers 12 --shards 4 -q && "$D/splitzip" compress /tmp/moe12 -o /tmp/moe12.c --no-sync -q || fail gen
  cat /tmp/moe12/* /tmp/moe12.c/objects/*/* >/dev/null
  for b in $BINS; do
    echo "$b: $("$D/$b" load /tmp/moe12.c --check | grep -E "matches")" || fail "$b load --check"
  done
  for r in $(seq ${ROUNDS:-3}); do
    for b in $BINS; do
      echo "FIRST r$r $b: $("$D/$b" bench load /tmp/moe12.c --rounds 1 --repeat 1 --device-times=false | grep compare)"
      "$D/$b" load /tmp/moe12.c --json --device-times=false | python3 -c "import json,sys; d=json.load(sys.stdin); r=d['runs'][0]; print('  $b json: %.1f GB/s, read %.0f ms verify %.0f ms submit %.0f ms summed' % (r['gb_per_s'], d['read_ns']/1e6, d['verify_ns']/1e6, d['submit_ns']/1e6))"
    done
  done
  rm -rf /tmp/moe12 /tmp/moe12.c ;;
moe) dataset moe --moe 64 --shards 8; rm -rf /tmp/moe /tmp/moe.base /tmp/moe.new ;;
llama) dataset llama --size 8GiB --shards 4 ;;
*) echo "unknown phase $PHASE"; exit 2 ;;
esac
echo "gpu-load-ab $PHASE status: $status"
exit $status
