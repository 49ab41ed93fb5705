#!/usr/bin/env bash
# Loads of builds and settings side by side on the H200, in one call:
#   scripts/gpu-load-variants.sh D ROUNDS "GEN FLAGS" VARIANT...
# D holds the binaries; each VARIANT is label:binary:compress flags:load
# flags[:environment] (flags and VAR=value pairs comma-separated), e.g.
# "base:base-splitzip::" or "pack4:splitzip:--pack-max,4MiB:--readers,12". The checkpoint is made
# once; each variant compresses it itself (a cache per distinct binary and
# compress flags), every cache is read once to warm the page cache, and
# the variants alternate for ROUNDS rounds: a first load from page cache
# (bench load, raw beside SplitZip) and re-faults from pinned-resident
# bytes. Logs to $OUT/load-variants.log.
set -uo pipefail
cd "$(dirname "$0")/.."
D=$1 ROUNDS=$2 GEN=$3
shift 3
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/load-variants.log") 2>&1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
S=/tmp/ab-src
rm -rf /tmp/ab-*
echo "gen $GEN"
"$D/splitzip" gen $S $GEN -q || exit 1
cache() { echo "/tmp/ab-$(echo "$1:$2" | md5sum | cut -c1-8)"; }
for v in "$@"; do
  IFS=: read -r label bin cflags lflags <<<"$v"
  c=$(cache "$bin" "$cflags")
  [ -d "$c" ] && continue
  "$D/$bin" compress $S -o "$c" --no-sync -q ${cflags//,/ } || { echo "FAILED: compress $label"; exit 1; }
  echo "$label: $(find "$c/objects" -type f | wc -l) object files"
done
cat $S/* /tmp/ab-*/objects/*/* >/dev/null
"$D/splitzip" load "$(cache splitzip "")" --check 2>/dev/null | grep -E "matches" || true
for r in $(seq "$ROUNDS"); do
  for v in "$@"; do
    IFS=: read -r label bin cflags lflags envs <<<"$v"
    c=$(cache "$bin" "$cflags")
    echo "AB $label r$r first:    $(env ${envs//,/ } "$D/$bin" bench load "$c" --rounds 1 --repeat 1 --device-times=false ${lflags//,/ } | grep compare)"
    echo "AB $label r$r resident: $(env ${envs//,/ } "$D/$bin" bench load "$c" --rounds 1 --resident --repeat 3 --device-times=false ${lflags//,/ } | grep compare | sed 's/.*repeats/repeats/')"
  done
done
rm -rf /tmp/ab-*
