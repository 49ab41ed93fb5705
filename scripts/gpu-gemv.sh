#!/usr/bin/env bash
# Matrix-vector products from fixed payloads (issue 36) on the GPU
# machine: builds gemv.cu with nvcc (into $OUT/k: the fatbin to commit
# and its stamp lines), runs the gpu package's Gemv tests against it,
# again under compute-sanitizer (memcheck: corrupt payloads never read
# outside them), times `splitzip bench gemv` and, in the same run,
# cuBLAS on the same shapes (scripts/gemv-cublas.py).
# Build here first:
#   F='-ldflags=-s -w'; mkdir -p .dev/gemv
#   CGO_ENABLED=0 go build "$F" -o .dev/gemv/splitzip ./cmd/splitzip
#   CGO_ENABLED=0 go test -c "$F" -o .dev/gemv/gpu.test ./gpu
#   go build -buildmode=c-shared "$F" -o .dev/gemv/libsplitzip.so ./capi  (for python/tests/test_nn.py)
# and carry .dev/gemv (D names another folder). NCU=1 adds ncu's speed of
# light and stalls; NCU_SOURCE=1 each SASS instruction's executed count
# ($OUT/ncu-sass.csv) and the executed totals (NCU_VARIANT=name: of that
# variant's build). SPLITS and VARIANTS: below. SHAPES, BATCHES, RUNS as
# bench gemv's flags; logs to $OUT. To land the kernel afterwards: copy
# $OUT/k/gemv.fatbin and $OUT/k/kernels_gen.go into gpu/ (go test ./gpu
# -run KernelStamp checks them).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/out}
D=${D:-.dev/gemv}
mkdir -p "$OUT/k"
B=$PWD/$D
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader | tee "$OUT/machine.txt"
echo "=== nvcc $(date +%T)"
# Every kernel, so that $OUT/k holds a kernels_gen.go to commit as is
# (nvcc 13.0 rebuilds decode and entropy byte for byte; gpu's stamp test
# says so if not).
OUTDIR=$OUT/k bash scripts/build-kernels.sh >"$OUT/nvcc.log" 2>&1 || { tail -30 "$OUT/nvcc.log"; exit 1; }
cmp -s "$OUT/k/decode.fatbin" gpu/decode.fatbin && cmp -s "$OUT/k/entropy.fatbin" gpu/entropy.fatbin || echo "note: decode or entropy fatbin differs from the committed one"
grep -A3 "gemv.*for 'sm_90'" "$OUT/nvcc.log" | grep -oE "splitzip_gemv_[a-z0-9_]+|Used [0-9]+ registers|[0-9]+ bytes stack frame|[0-9]+ bytes spill stores" | paste -sd' ' | sed 's/ splitzip/\nsplitzip/g'
echo "local memory instructions in gemv.fatbin (sm_90): $(cuobjdump -sass -arch sm_90 "$OUT/k/gemv.fatbin" 2>/dev/null | grep -cE '(LDL|STL)')"
# The sm_90 SASS of the batch-1 kernels, and their instructions by opcode
# (how many instructions a weight costs: the fused kernel issues, it does
# not wait on memory; docs/DESIGN.md 3.4).
for k in fixed_b1 ref_b1; do
	cuobjdump -sass -arch sm_90 -fun "splitzip_gemv_$k" "$OUT/k/gemv.fatbin" >"$OUT/sass-$k.txt" 2>&1
	echo "$k: $(grep -cE '^ +/\*[0-9a-f]{4,6}\*/' "$OUT/sass-$k.txt") instructions; most: $(grep -oE '^ +/\*[0-9a-f]{4,6}\*/ +(@!?U?P[0-9T] +)?[A-Z0-9_]+' "$OUT/sass-$k.txt" | awk '{print $NF}' | sed 's/\..*//' | sort | uniq -c | sort -rn | head -8 | awk '{printf "%s %s, ", $2, $1}')"
done
# $OUT/k/gemv.fatbin and $OUT/k/kernels_gen.go are the files to commit
# (into gpu/). At most 8 files come back from $OUT: pack it into one at
# the end (tar czf) and unpack it here.
export SPLITZIP_GEMV_FATBIN=$OUT/k/gemv.fatbin
# ONLY_VARIANTS=1: only the builds and the variants' timings.
if [ -z "${ONLY_VARIANTS:-}" ]; then
echo "=== tests $(date +%T)"
(cd gpu && timeout 100 "$B/gpu.test" -test.count=1 -test.v -test.run 'Gemv|KernelConstants' >"$OUT/gemv-tests.log" 2>&1; echo "exit $?" >>"$OUT/gemv-tests.log")
grep -E "^(--- |ok|FAIL|PASS|exit)|gemv_test" "$OUT/gemv-tests.log" | head -30
if [ -f "$B/libsplitzip.so" ]; then
	echo "=== python test_nn $(date +%T)"
	(cd python/tests && SPLITZIP_LIB=$B/libsplitzip.so SPLITZIP_BIN=$B/splitzip timeout 120 python3 -m unittest test_nn -v >"$OUT/test_nn.log" 2>&1; echo "exit $?" >>"$OUT/test_nn.log")
	grep -E "ok$|FAIL|ERROR|skipped|Error|^exit|^Ran" "$OUT/test_nn.log" | head -20
fi
echo "=== compute-sanitizer memcheck $(date +%T)"
(cd gpu && timeout 300 compute-sanitizer --tool memcheck --error-exitcode 9 "$B/gpu.test" -test.count=1 -test.run 'TestGemvCorruptPayloads|TestGemvShapes' >"$OUT/gemv-memcheck.log" 2>&1; echo "exit $?" >>"$OUT/gemv-memcheck.log")
grep -E "ERROR SUMMARY|^(--- |ok|FAIL|PASS|exit)" "$OUT/gemv-memcheck.log" | head
echo "=== bench gemv $(date +%T)"
"$B/splitzip" bench gemv --shape "${SHAPES:-4096x4096,14336x4096,4096x14336,128256x4096}" --batch "${BATCHES:-1,8,16}" --runs "${RUNS:-30}" --json >"$OUT/bench-gemv.json" 2>"$OUT/bench-gemv.err"
python3 - "$OUT/bench-gemv.json" <<'PY' || tail -5 "$OUT/bench-gemv.err"
import json, sys
r = json.load(open(sys.argv[1]))
print(f"{r['device']}: device copy {r['copy_gb_per_s']:.0f} GB/s (read+write)")
for x in r["results"]:
    f, ref = x["fused"], x["reference"]
    print(f"{x['rows']:6d} x {x['cols']:<6d} batch {x['batch']:2d}  fused {f['median_us']:8.1f} us ({f['gb_per_s']:5.0f} GB/s of weights, {x['payload_gb_per_s']:5.0f} of payload)  reference {ref['median_us']:8.1f} us ({ref['gb_per_s']:5.0f})  {x['speedup']:.2f}x")
PY
fi
# SPLITS="4 8" times the build again with every launch's split forced to
# each (SPLITZIP_GEMV_WARPS; the tests run every split themselves).
for w in ${SPLITS:-}; do
	echo "=== split $w $(date +%T)"
	SPLITZIP_GEMV_WARPS=$w "$B/splitzip" bench gemv --shape "${SHAPES:-4096x4096,14336x4096,4096x14336,128256x4096}" --batch "${BATCHES:-1,8,16}" --runs "${RUNS:-30}" --json >"$OUT/bench-w$w.json" 2>"$OUT/bench-w$w.err"
	python3 - "$OUT/bench-w$w.json" <<'PY' || tail -3 "$OUT/bench-w$w.err"
import json, sys
for x in json.load(open(sys.argv[1]))["results"]:
    print(f"{x['rows']:6d} x {x['cols']:<6d} batch {x['batch']:2d}  fused {x['fused']['median_us']:8.1f} us ({x['payload_gb_per_s']:5.0f} GB/s of payload)  reference {x['reference']['median_us']:8.1f} us")
PY
done
# VARIANTS="name:-DGZ_ROUND=2 ...;name2:..." builds gemv.cu again with
# each set of nvcc flags and times each the same way (kernel experiments);
# VTEST=1 also runs each variant's Gemv tests, VTEST=2 memcheck as well.
IFS=';' read -ra vs <<<"${VARIANTS:-}"
for v in "${vs[@]}"; do
	name=${v%%:*}
	mkdir -p "$OUT/v/$name"
	OUTDIR=$OUT/v/$name KERNELS=gemv NVCC_EXTRA="${v#*:}" bash scripts/build-kernels.sh >"$OUT/v/$name/nvcc.log" 2>&1 || { tail -5 "$OUT/v/$name/nvcc.log"; continue; }
	echo "=== variant $name (${v#*:}): $(grep -A3 "gemv_fixed_b1' for 'sm_90'" "$OUT/v/$name/nvcc.log" | grep -oE "[0-9]+ bytes stack frame|Used [0-9]+ registers" | paste -sd' ')"
	cuobjdump -sass -arch sm_90 -fun splitzip_gemv_fixed_b1 "$OUT/v/$name/gemv.fatbin" >"$OUT/v/$name/sass-fixed_b1.txt" 2>&1
	echo "fixed_b1: $(grep -cE '^ +/\*[0-9a-f]{4,6}\*/' "$OUT/v/$name/sass-fixed_b1.txt") instructions"
	if [ -n "${VTEST:-}" ]; then
		# The variant's own tests: its fused kernel against its reference,
		# bit for bit, and memcheck of the corrupt payloads and shapes.
		(cd gpu && SPLITZIP_GEMV_FATBIN=$OUT/v/$name/gemv.fatbin timeout 100 "$B/gpu.test" -test.count=1 -test.run 'TestGemv' >"$OUT/v/$name/tests.log" 2>&1; echo "exit $?" >>"$OUT/v/$name/tests.log")
		echo "tests: $(grep -E '^(--- FAIL|ok|FAIL|PASS|exit)' "$OUT/v/$name/tests.log" | paste -sd' ')"
		[ "$VTEST" = 2 ] && (cd gpu && SPLITZIP_GEMV_FATBIN=$OUT/v/$name/gemv.fatbin timeout 200 compute-sanitizer --tool memcheck --error-exitcode 9 "$B/gpu.test" -test.count=1 -test.run 'TestGemvCorruptPayloads|TestGemvShapes' >"$OUT/v/$name/memcheck.log" 2>&1; echo "exit $?" >>"$OUT/v/$name/memcheck.log")
		[ "$VTEST" = 2 ] && echo "memcheck: $(grep -E 'ERROR SUMMARY|^exit' "$OUT/v/$name/memcheck.log" | paste -sd' ')"
	fi
	SPLITZIP_GEMV_FATBIN=$OUT/v/$name/gemv.fatbin "$B/splitzip" bench gemv --shape "${SHAPES:-4096x4096,14336x4096,4096x14336,128256x4096}" --batch "${VBATCHES:-1,16}" --runs "${RUNS:-30}" --json >"$OUT/v/$name/bench.json" 2>"$OUT/v/$name/bench.err"
	python3 - "$OUT/v/$name/bench.json" <<'PY' || tail -3 "$OUT/v/$name/bench.err"
import json, sys
for x in json.load(open(sys.argv[1]))["results"]:
    print(f"{x['rows']:6d} x {x['cols']:<6d} batch {x['batch']:2d}  fused {x['fused']['median_us']:8.1f} us ({x['payload_gb_per_s']:5.0f} GB/s of payload)  reference {x['reference']['median_us']:8.1f} us")
PY
done
if [ -z "${ONLY_VARIANTS:-}" ]; then
echo "=== cuBLAS $(date +%T)"
python3 scripts/gemv-cublas.py "${SHAPES:-4096x4096,14336x4096,4096x14336,128256x4096}" "${BATCHES:-1,8,16}" "${RUNS:-30}" "$OUT/cublas.json" 2>&1 | tee "$OUT/cublas.txt"
fi
if [ -n "${NCU:-}" ]; then
	# Achieved DRAM bandwidth of the fused and reference kernels at batch
	# 1 on the layer shapes (issue 36 asks for it against the HBM peak).
	echo "=== ncu $(date +%T)"
	for k in fixed_b1 ref_b1; do
		timeout 150 ncu --section SpeedOfLight --section Occupancy --section WarpStateStats --section MemoryWorkloadAnalysis --metrics "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio" \
			-k "splitzip_gemv_$k" --launch-skip 5 --launch-count 1 \
			"$B/splitzip" bench gemv --shape "${NCU_SHAPE:-14336x4096}" --batch 1 --runs 20 >"$OUT/ncu-$k.txt" 2>&1
		grep -E "Duration|DRAM Throughput|Memory Throughput|Achieved Occupancy|Registers Per|Stall|Warp Cycles Per Issued|L1/TEX Hit|L2 Hit|Local|stalled_" "$OUT/ncu-$k.txt" | awk '$NF+0 > 0.05 || !/stalled_/' | head -40
	done
fi
if [ -n "${NCU_SOURCE:-}" ]; then
	# Every SASS instruction of the batch-1 fused kernel with how often
	# it ran (ncu's source page, ncu-sass.csv: sum it by opcode for where
	# a weight's instructions go), and the executed totals.
	echo "=== ncu source $(date +%T)"
	[ -n "${NCU_VARIANT:-}" ] && export SPLITZIP_GEMV_FATBIN=$OUT/v/$NCU_VARIANT/gemv.fatbin
	timeout 200 ncu --section InstructionStats --section SourceCounters --section WarpStateStats -k splitzip_gemv_fixed_b1 --launch-skip 5 --launch-count 1 -f -o "$OUT/src" \
		"$B/splitzip" bench gemv --shape "${NCU_SHAPE:-14336x4096}" --batch 1 --runs 20 >"$OUT/ncu-src.log" 2>&1
	ncu -i "$OUT/src.ncu-rep" --page source --csv --print-source sass >"$OUT/ncu-sass.csv" 2>>"$OUT/ncu-src.log"
	ncu -i "$OUT/src.ncu-rep" --page details >"$OUT/ncu-details.txt" 2>>"$OUT/ncu-src.log"
	rm -f "$OUT/src.ncu-rep"
	grep -E "Executed Instructions|Issued Instructions|Warp Cycles Per Issued" "$OUT/ncu-details.txt" | head
fi
echo "=== done $(date +%T)"
