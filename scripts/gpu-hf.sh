#!/usr/bin/env bash
# transformers on the GPU machine: the Python tests that use transformers
# (test_transformers, test_offload), then the architecture matrix
# (scripts/hf-matrix.py) or the load and generation timings
# (scripts/hf-bench.py), or batch-1 decoding of an 8.8 GiB
# mixture-of-experts model offloaded by layer and by expert
# (scripts/moe-offload-bench.py). Build here first:
#   CGO_ENABLED=0 go build -o .dev/splitzip ./cmd/splitzip && make capi
# and carry .dev/splitzip and python/splitzip/libsplitzip.so.
#   scripts/gpu-hf.sh tests|matrix|bench|moe [args for the script]
# Logs go to $OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
what=$1
shift
export SPLITZIP_BIN=$PWD/.dev/splitzip SPLITZIP_LIB=$PWD/python/splitzip/libsplitzip.so
python3 -c 'import torch, transformers, accelerate; print("torch", torch.__version__, "transformers", transformers.__version__, "accelerate", accelerate.__version__, torch.cuda.get_device_name(0))' | tee "$OUT/versions.txt"
case $what in
tests)
	(cd python/tests && python3 -m unittest test_transformers test_offload test_offload_experts test_source test_pieces -v) 2>&1 | tee "$OUT/tests.log"
	exit "${PIPESTATUS[0]}" ;;
matrix)
	python3 scripts/hf-matrix.py --out "$OUT" "$@" 2>"$OUT/matrix.err" | tee "$OUT/matrix.log"
	exit "${PIPESTATUS[0]}" ;;
bench)
	python3 scripts/hf-bench.py --out "$OUT" "$@" 2>"$OUT/bench.err" | tee "$OUT/bench.log"
	exit "${PIPESTATUS[0]}" ;;
moe)
	python3 scripts/moe-offload-bench.py --out "$OUT" "$@" 2>"$OUT/moe.err" | tee "$OUT/moe.log"
	exit "${PIPESTATUS[0]}" ;;
*)
	echo "usage: scripts/gpu-hf.sh tests|matrix|bench|moe [args]" >&2
	exit 2 ;;
esac
