#!/usr/bin/env bash
# Entropy coder CPU benchmarks, builds alternating (the GPU machine's
# host is quieter than the 2-core one): scripts/cpu-entropy-ab.sh D
# ROUNDS NAME... runs D/ent-NAME.test (go test -c ./codec/entropy) for
# each NAME in turn, ROUNDS times, one core (-test.cpu 1), and prints
# each benchmark's ns/op per build: every round, then min and median.
set -uo pipefail
D=$1 R=$2; shift 2
for r in $(seq "$R"); do
  for b in "$@"; do
    "$D/ent-$b.test" -test.run XXX -test.bench "${BENCH:-EncodePayload|DecodePayload|EncodeChunk|DecodeChunk}" -test.cpu 1 -test.benchtime ${BT:-1s} 2>&1 |
      awk -v b="$b" '/^Bench/{print b, $1, $3}'
  done
done | tee /dev/stderr | sort -k2,2 -k1,1 -k3,3n | awk '{k=$2" "$1; v[k]=v[k]" "$3; c[k]++} END {for (k in v) {split(v[k],a," "); printf "%-40s min %10d  median %10d  (n=%d)\n", k, a[1], a[int((c[k]+1)/2)], c[k]}}' | sort
