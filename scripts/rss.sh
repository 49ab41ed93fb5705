#!/usr/bin/env bash
# Peak RSS of compress, verify and decompress:
#   scripts/rss.sh BIN CHECKPOINT WORKDIR [flags for compress and verify...]
# Prints one line per command: name, peak RSS in MiB, seconds.
set -euo pipefail
bin=$1 src=$2 work=$3
shift 3
here=$(dirname "$0")
rm -rf "$work"; mkdir -p "$work"
python3 "$here/peak-rss.py" compress "$bin" compress "$src" -o "$work/cache" --no-sync -q "$@"
python3 "$here/peak-rss.py" verify "$bin" verify "$work/cache" -q "$@"
python3 "$here/peak-rss.py" decompress "$bin" decompress "$work/cache" -o "$work/out" -q
rm -rf "$work"
