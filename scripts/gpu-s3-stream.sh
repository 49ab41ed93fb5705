#!/usr/bin/env bash
# Streaming a remote cache to the GPU (issue 35, item 3): a loopback S3
# server (versitygw, from scripts/need-s3.sh) on the GPU machine holds a
# generated checkpoint's caches (raw: every tensor raw; fixed; entropy),
# pushed by `compress -o s3://`; `load s3://...` streams each to the GPU
# (ranged GETs into pinned staging, no local copy), beside a load of the
# same fixed cache pulled to local disk, and the bare loopback GET rate
# (s3store's BenchmarkGetRanges, from $B/s3store.test if there: ranged
# GETs of 8 MiB into memory, as a streamed load's; oci's
# BenchmarkS3Pull/raw-get: ranged GETs of the shard files into files, as
# a pull's).
# Build here first:
#   F='-ldflags=-s -w'; mkdir -p .dev/s3gpu
#   CGO_ENABLED=0 go build "$F" -o .dev/s3gpu/splitzip ./cmd/splitzip
#   CGO_ENABLED=0 go test -c "$F" -o .dev/s3gpu/oci.test ./oci
#   cp .dev/bin/versitygw .dev/s3gpu/ && tar czf .dev/s3gpu.tgz .dev/s3gpu
# and carry .dev/s3gpu.tgz (or set B to a folder holding the three).
# A baseline build (a build of main) at $B/splitzip-base streams the same
# caches beside this build's, in the same run.
# SIZE (default 8GiB); VARIANTS="--readers 16|--streams 4" adds streamed
# loads with each set of load flags; ALT="splitzip-x|splitzip-y --readers 16"
# adds streamed loads by other binaries in $B (an experiment's builds),
# each with its flags; PROFILE=1 writes a CPU profile of
# each streamed load into $OUT; logs to $OUT. Each streamed load reports
# the CPU time it took and the server's CPU time over it (both share the
# host's cores: on loopback the stream is bound by them).
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/out}
SIZE=${SIZE:-8GiB}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/s3-stream.log") 2>&1
B=${B:-}
if [ -z "$B" ]; then
	[ -d .dev/s3gpu ] || tar xzf .dev/s3gpu.tgz
	B=$PWD/.dev/s3gpu
fi
W=$(mktemp -d /tmp/s3stream.XXXX)
mkdir -p "$W/root/bench" "$W/meta"
export AWS_ACCESS_KEY_ID=bench AWS_SECRET_ACCESS_KEY=bench-secret AWS_REGION=us-east-1 AWS_ENDPOINT_URL_S3=http://127.0.0.1:7079
"$B/versitygw" --access bench --secret bench-secret --port 127.0.0.1:7079 --quiet posix --sidecar "$W/meta" "$W/root" >"$OUT/versitygw.log" 2>&1 &
gw=$!
trap 'kill $gw; rm -rf "$W"' EXIT
sleep 1
# srv prints the server's CPU seconds so far (user + system, from /proc).
tick=$(getconf CLK_TCK)
srv() { awk -v t="$tick" '{ printf "%.2f", ($14 + $15) / t }' "/proc/$gw/stat"; }
# cpu runs a command, then prints its CPU seconds and the server's over it.
cpu() {
	local s0 TIMEFORMAT="  load process: %R s wall, %U s user, %S s system"
	s0=$(srv)
	time "$@"
	echo "  server: $(awk -v a="$s0" -v b="$(srv)" 'BEGIN { printf "%.2f", b - a }') s of CPU"
}
nproc; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
echo "=== gen and compress -o s3:// ($SIZE) $(date +%T)"
"$B/splitzip" gen "$W/ck" --size "$SIZE" --shards 4 >/dev/null
"$B/splitzip" compress "$W/ck" -o s3://bench/m:fixed --no-sync | tail -1
"$B/splitzip" compress "$W/ck" -o s3://bench/m:entropy --codec entropy --no-sync | tail -1
"$B/splitzip" compress "$W/ck" -o s3://bench/m:raw --min-saving 0.99 --no-sync | tail -1
rm -rf "$W/ck" # the loads must not find the source
sync; echo 3 >/proc/sys/vm/drop_caches 2>/dev/null
for c in raw fixed entropy; do
	echo "=== load s3://bench/m:$c streamed $(date +%T)"
	{ cpu timeout 120 "$B/splitzip" load "s3://bench/m:$c" --repeat 3 ${PROFILE:+--cpuprofile "$OUT/stream-$c.prof"}; } 2>&1 | grep -E "run|first|moved|summed|streaming|process|server"
	if [ -x "$B/splitzip-base" ]; then
		echo "--- the same with the baseline binary"
		{ cpu timeout 120 "$B/splitzip-base" load "s3://bench/m:$c" --repeat 3; } 2>&1 | grep -E "run|first|moved|summed|streaming|process|server"
	fi
done
IFS='|' read -ra variants <<<"${VARIANTS:-}"
for v in "${variants[@]}"; do
	for c in raw fixed entropy; do
		echo "=== load s3://bench/m:$c streamed, $v $(date +%T)"
		{ cpu timeout 120 "$B/splitzip" load "s3://bench/m:$c" --repeat 3 $v; } 2>&1 | grep -E "run|summed|process|server"
	done
done
IFS='|' read -ra alts <<<"${ALT:-}"
for a in "${alts[@]}"; do
	read -r bin flags <<<"$a"
	for c in raw fixed entropy; do
		echo "=== load s3://bench/m:$c streamed by $bin $flags $(date +%T)"
		{ cpu timeout 120 "$B/$bin" load "s3://bench/m:$c" --repeat 3 $flags; } 2>&1 | grep -E "run|summed|pinned|process|server"
	done
done
echo "=== load s3://bench/m:fixed --check $(date +%T)"
timeout 120 "$B/splitzip" load s3://bench/m:fixed --check 2>&1 | tail -2
echo "=== fixed pulled to local disk, then loaded $(date +%T)"
timeout 120 "$B/splitzip" pull s3://bench/m:fixed "$W/local" --no-sync | tail -1
timeout 120 "$B/splitzip" load "$W/local" --repeat 3 2>&1 | grep -E "run|first|moved"
echo "=== bare loopback GET rate $(date +%T)"
if [ -x "$B/s3store.test" ]; then
	(cd s3store && SPLITZIP_S3_BIN=$B/versitygw SPLITZIP_S3_BENCH_BYTES=$((4 << 30)) timeout 200 "$B/s3store.test" -test.run XXX -test.bench GetRanges -test.benchtime 3x -test.count ${COUNT:-3} 2>&1 | grep -E "Benchmark|ok|FAIL")
fi
(cd oci && SPLITZIP_S3_BIN=$B/versitygw SPLITZIP_S3_BENCH_BYTES=$((4 << 30)) timeout 200 "$B/oci.test" -test.run XXX -test.bench 'S3Pull/raw-get' -test.benchtime 3x -test.count 3 2>&1 | grep -E "Benchmark|ok|FAIL")
echo "=== done $(date +%T)"
