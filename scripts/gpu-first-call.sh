#!/usr/bin/env bash
# A session's GPU calls from one bundle, most valuable first, each part
# within LIMIT seconds (default 560) of device time. Build the bundle here
# (make gpu-bundle: .dev/gpu.txz, about 33 MB; add .dev/gpu/base-splitzip,
# a build of 14b54ee, for the order part) and carry it with this script:
#   run carry=[".dev/gpu.txz"] command="LIMIT=570 scripts/gpu-first-call.sh first"
# Parts:
#   first  on an H200: the architecture matrix (hf-matrix.py, --repeat 5)
#          and gemvq; then the Go GPU suites, a GPU load of tensors served
#          from a payload stored for another dtype's same bytes (trial
#          70), and the Python GPU tests with what time is left
#   order  load --compare of a 2 GiB Llama fixed cache, base-splitzip
#          (raw first in every round) beside this build, 2 rounds
#   hf     the architecture matrix alone
#   moe    moe-offload-bench.py --interleave 5 --entropy
#   gemvq  bench gemv beside cuBLAS (gemv-cublas.py) from the committed
#          kernels, 2 rounds, then ncu's DRAM rate of both kernels
#   tier   the 8B gpu tier in turns with the resident model, the scatter
#          grid unset and at 132 blocks (SPLITZIP_SCATTER_BLOCKS)
# Logs go to $OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
what=${1:-first}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
[ -x .dev/gpu/splitzip ] || tar xJf .dev/gpu.txz
cp -f .dev/gpu/splitzip .dev/splitzip
D=.dev/gpu
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/machine-$what.txt"
nproc >> "$OUT/machine-$what.txt"
t0=$(date +%s)
left() { echo $(( ${LIMIT:-560} - ($(date +%s) - t0) )); }
case $what in
first)
  if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
    timeout 200 scripts/gpu-hf.sh matrix --bin .dev/splitzip --repeat 5 > "$OUT/matrix-tail.txt" 2>&1
    echo "matrix: exit $?, left $(left) s"; tail -8 "$OUT/matrix-tail.txt"
    LIMIT=$(( $(left) - 330 )) bash "$0" gemvq
    echo "left $(left) s"
  fi
  scripts/gpu-suites.sh go 2>&1 | tee "$OUT/suites-go.txt"
  echo "left $(left) s"
  # trial 70: tensors served from a payload stored for another dtype's same bytes, loaded on the GPU
  python3 - <<'PY'
import json, struct, os, random
def mk(d, specs, b):
    hdr = {}; off = 0
    for name, dt, n in specs:
        hdr[name] = {"dtype": dt, "shape": [n], "data_offsets": [off, off + len(b)]}; off += len(b)
    h = json.dumps(hdr).encode(); h += b" " * (-len(h) % 8); os.makedirs(d, exist_ok=True)
    open(d + "/model.safetensors", "wb").write(struct.pack("<Q", len(h)) + h + b * len(specs))
random.seed(1)
noise = b"".join(struct.pack("<H", struct.unpack("<I", struct.pack("<f", random.gauss(0, 0.02)))[0] >> 16) for _ in range(1 << 19))
mk("/tmp/xd1", [("bias", "BF16", 1 << 19), ("mask", "BOOL", 1 << 20), ("half", "F16", 1 << 19)], bytes(1 << 20))
mk("/tmp/xd2", [("r16", "F16", 1 << 19), ("rb", "BF16", 1 << 19), ("r32", "F32", 1 << 18), ("u8", "U8", 1 << 20)], noise)
PY
  for x in xd1 xd2; do for c in fixed entropy auto; do for j in 1 4; do
    rm -rf /tmp/$x.c; $D/splitzip compress /tmp/$x -o /tmp/$x.c --codec $c -j $j --self-contained -q --no-sync >/dev/null 2>&1 || echo "FAILED compress $x $c -j $j"
    $D/splitzip load /tmp/$x.c --check --source /tmp/$x 2>&1 | grep -q "matches" && echo "ok $x $c -j $j: $($D/splitzip inspect /tmp/$x.c | head -1 | grep -o '([^)]*)' | head -1)" || echo "FAILED load --check $x $c -j $j"
  done; done; done 2>&1 | tee "$OUT/crossdtype.txt"
  export SPLITZIP_BIN=$PWD/.dev/gpu/splitzip SPLITZIP_LIB=$PWD/python/splitzip/libsplitzip.so
  (cd python/tests && timeout $(( $(left) - 5 )) python3 -m unittest -v test_offload test_offload_experts test_transformers test_source test_pieces test_shared test_nn test_torch) > "$OUT/python.log" 2>&1
  echo "python: exit $?"; grep -E "^(Ran|OK|FAILED)|(FAIL|ERROR):" "$OUT/python.log" | head -20
  echo "left $(left) s" ;;
order)
  # the order's bias: a 2 GiB Llama fixed cache, load --compare 3, old (raw-first) beside new, in turns
  [ -x $D/base-splitzip ] || { echo "order: needs $D/base-splitzip (a build of 14b54ee, which ran raw first)"; exit 2; }
  if [ "$(left)" -gt 90 ]; then
    {
    $D/splitzip gen /tmp/ll --size 2GiB -q && $D/splitzip compress /tmp/ll -o /tmp/ll.c --no-sync -q && $D/base-splitzip compress /tmp/ll -o /tmp/ll.b --no-sync -q
    cat /tmp/ll/* /tmp/ll.c/objects/*/* /tmp/ll.b/objects/*/* > /dev/null
    for r in 1 2; do
      echo "--- round $r base (14b54ee, raw first)"; timeout 60 $D/base-splitzip load /tmp/ll.b --compare 3 2>&1 | tail -8
      echo "--- round $r new"; timeout 60 $D/splitzip load /tmp/ll.c --compare 3 2>&1 | tail -10
    done
    } 2>&1 | tee "$OUT/compare-order.txt"
  fi ;;
hf)
  timeout $(( $(left) - 20 )) scripts/gpu-hf.sh matrix --bin .dev/splitzip --repeat 5 2>&1 | tail -60 > "$OUT/matrix-tail.txt"
  echo "left $(left) s" ;;
moe)
  timeout $(( $(left) - 10 )) scripts/gpu-hf.sh moe --interleave 5 --entropy --skip accelerate 2>&1 | tail -60 > "$OUT/moe-tail.txt"
  echo "left $(left) s" ;;
gemvq)
  # the committed kernels (embedded): bench gemv beside cuBLAS in one call, then ncu's DRAM rate
  S="4096x4096,1024x4096,14336x4096,4096x14336,128256x4096"
  for r in 1 2; do
    echo "=== round $r bench gemv $(date +%T)"
    $D/splitzip bench gemv --shape $S --batch 1,8,16 --runs 30 --json > "$OUT/bench-gemv-$r.json" 2>"$OUT/bench-gemv-$r.err"
    python3 - "$OUT/bench-gemv-$r.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
print(f"{r['device']}: device copy {r['copy_gb_per_s']:.0f} GB/s (read+write)")
for x in r["results"]:
    f, ref = x["fused"], x["reference"]
    print(f"{x['rows']:6d} x {x['cols']:<6d} batch {x['batch']:2d}  fused {f['median_us']:8.1f} us ({x['payload_gb_per_s']:5.0f} GB/s of payload)  reference {ref['median_us']:8.1f} us ({ref['gb_per_s']:5.0f})")
PY
    echo "=== round $r cuBLAS $(date +%T)"
    python3 scripts/gemv-cublas.py "$S" 1,8,16 30 "$OUT/cublas-$r.json" 2>&1
  done | tee "$OUT/gemvq.txt"
  if [ "$(left)" -gt 60 ]; then
    for k in fixed_b1 ref_b1; do
      timeout 60 ncu --section SpeedOfLight --section MemoryWorkloadAnalysis -k "splitzip_gemv_$k" --launch-skip 5 --launch-count 1 \
        $D/splitzip bench gemv --shape 14336x4096 --batch 1 --runs 20 > "$OUT/ncu-$k.txt" 2>&1
      grep -E "Duration|DRAM Throughput|Memory Throughput" "$OUT/ncu-$k.txt" | head -5
    done
  fi ;;
tier)
  for b in "" 132; do
    echo "=== SPLITZIP_SCATTER_BLOCKS=${b:-unset}"
    env ${b:+SPLITZIP_SCATTER_BLOCKS=$b} TIERS=gpu INTERLEAVE=5 ACCEL=0 timeout $(( $(left) / 2 )) python3 scripts/gpu-offload-8b.py .dev/splitzip /tmp/w8b 2>&1 | tail -30
  done 2>&1 | tee "$OUT/tier8b.txt" ;;
*)
  echo "usage: scripts/gpu-first-call.sh first|order|hf|moe|gemvq|tier" >&2
  exit 2 ;;
esac
