#!/usr/bin/env bash
# The measurements issue 32 still wants on the GPU machine, in one call
# of under ten minutes: the routed scatter's rate from device and pinned
# host memory, the architecture matrix, hf-bench's loads and offloaded
# forwards (the scatter grid at its default, 132 and 66 blocks, to see
# what a layer fault beside the forward costs it), and the MoE decoding
# bench (host and device routing, graph decoding). Build here first:
#   F='-ldflags=-s -w'; CGO_ENABLED=0 go build "$F" -o .dev/gpu/splitzip ./cmd/splitzip
#   CGO_ENABLED=0 go test -c "$F" -o .dev/gpu/gpu.test ./gpu; make capi
# and carry .dev/gpu and python/splitzip/libsplitzip.so. Logs go to $OUT.
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/out}
D=${D:-.dev/gpu}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/moe-graph.log") 2>&1
export SPLITZIP_BIN=$PWD/$D/splitzip SPLITZIP_LIB=$PWD/python/splitzip/libsplitzip.so
(cd gpu && timeout 60 "../$D/gpu.test" -test.run XXX -test.bench ScatterRouted -test.benchtime 40x -test.count 3 2>&1 | grep -E "Benchmark|ok|FAIL")
echo "=== matrix $(date +%T)"
timeout 200 python3 scripts/hf-matrix.py --bin "$D/splitzip" --out "$OUT" 2>"$OUT/matrix.err" >"$OUT/matrix.log"
echo "matrix: exit $?"; tail -3 "$OUT/matrix.log"
echo "=== hf-bench $(date +%T)"
timeout 150 python3 scripts/hf-bench.py --bin "$D/splitzip" --out "$OUT" --parts load,forward 2>"$OUT/bench.err" | grep -v "^{"
for b in 132 66; do
	echo "=== forward, scatter blocks $b $(date +%T)"
	SPLITZIP_SCATTER_BLOCKS=$b timeout 80 python3 scripts/hf-bench.py --bin "$D/splitzip" --out "$OUT" --parts forward --tag "b$b" 2>>"$OUT/bench.err" | grep -v "^{"
done
echo "=== moe $(date +%T)"
timeout 170 python3 scripts/moe-offload-bench.py --bin "$D/splitzip" --out "$OUT" \
	--skip experts-predict1,experts-predict2,accelerate,layers 2>"$OUT/moe.err" | tail -8
echo "done $(date +%T)"
