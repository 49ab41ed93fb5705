#!/usr/bin/env bash
# Entropy kernel variants on the H200, same run: each argument is
# name:nvcc-flags (e.g. "l5:-DEZ_LOOKUPS=5 -DEZ_STEPS=20"); each is built
# into $OUT/v-name and timed with bench decode --codec entropy at SZ
# (default 64MiB) for DT (default BF16,F8_E4M3). D (default .dev/g12)
# holds splitzip.
set -uo pipefail
cd "$(dirname "$0")/.."
D=${D:-.dev/g12}
for v in "$@"; do
  name=${v%%:*} flags=${v#*:}
  K=$OUT/v-$name
  NVCC_EXTRA="$flags" OUTDIR=$K bash scripts/build-kernels.sh >/dev/null 2>&1 || { echo "$name: nvcc failed"; continue; }
  echo "== $name ($flags)"
  SPLITZIP_ENTROPY_FATBIN=$K/entropy.fatbin "$D/splitzip" bench decode --codec entropy --dtype "${DT:-BF16,F8_E4M3}" --size "${SZ:-64MiB}" --runs 20 | grep -E "in-place" | cut -c1-120
done
