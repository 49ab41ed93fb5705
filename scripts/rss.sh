#!/usr/bin/env bash
# Peak RSS of compress, verify and decompress: scripts/rss.sh BIN CHECKPOINT WORKDIR [flags...]
# Prints one line per command: name, peak RSS in MiB, seconds.
set -euo pipefail
bin=$1 src=$2 work=$3
shift 3
rm -rf "$work"; mkdir -p "$work"
measure() {
  local name=$1; shift
  /usr/bin/time -f "%M %e" -o "$work/time" "$@" >/dev/null
  read -r kb secs <"$work/time"
  printf '%-11s peak RSS %6.1f MiB  %6.2f s\n' "$name" "$(echo "$kb/1024" | bc -l)" "$secs"
}
measure compress "$bin" compress "$src" -o "$work/cache" --no-sync -q "$@"
measure verify "$bin" verify "$work/cache" -q "$@"
measure decompress "$bin" decompress "$work/cache" -o "$work/out" -q
