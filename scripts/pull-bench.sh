#!/usr/bin/env bash
# Pull throughput from a loopback CNCF Distribution registry (Debian's
# docker-registry): `splitzip pull` of a checkpoint's caches (raw: every
# tensor kept raw, the checkpoint's bytes as an artifact; fixed; entropy)
# beside `crane pull --format oci` of the same artifacts, in one run,
# each pull into an empty folder, N times, medians. crane is built from
# its Go module (the version go.mod pins). Here (Go) or anywhere with Go.
#   scripts/pull-bench.sh [SIZE (default 1GiB)] [N (default 5)]
# PROFILE=DIR writes a CPU profile of each splitzip pull there.
# BASE=BIN adds a baseline splitzip binary's durable pull (a build of
# main) beside this tree's, in the same run.
set -euo pipefail
cd "$(dirname "$0")/.."
size=${1:-1GiB}
n=${2:-5}
w=$(mktemp -d)
trap 'kill $regpid 2>/dev/null; rm -rf "$w"' EXIT
reg=$(bash scripts/need-registry.sh)
ver=$(go list -m -f '{{.Version}}' github.com/google/go-containerregistry)
GOBIN=$w/bin go install "github.com/google/go-containerregistry/cmd/crane@$ver"
go build -o "$w/bin/splitzip" ./cmd/splitzip
sz=$w/bin/splitzip crane=$w/bin/crane
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
host=127.0.0.1:$port
printf 'version: 0.1\nlog:\n  level: error\n  accesslog:\n    disabled: true\nstorage:\n  filesystem:\n    rootdirectory: %s\nhttp:\n  addr: %s\n' "$w/store" "$host" >"$w/reg.yml"
"$reg" serve "$w/reg.yml" >"$w/reg.log" 2>&1 &
regpid=$!
for _ in $(seq 100); do curl -sf "http://$host/v2/" >/dev/null && break; sleep 0.1; done
"$sz" gen "$w/ck" --size "$size" --shards 4 >/dev/null
"$sz" compress "$w/ck" -o "$w/raw" --self-contained --min-saving 0.99 --no-sync >/dev/null
"$sz" compress "$w/ck" -o "$w/fixed" --self-contained --no-sync >/dev/null
"$sz" compress "$w/ck" -o "$w/entropy" --codec entropy --self-contained --no-sync >/dev/null
for c in raw fixed entropy; do "$sz" push "$w/$c" "$host/bench/m:$c" --insecure >/dev/null; done
rawbytes=$(du -sb "$w/ck" | cut -f1)
echo "checkpoint $size ($rawbytes bytes in shards), $(nproc) cores, $n pulls each, median seconds; MB/s of the checkpoint's raw bytes"
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
timeit() { local s e; s=$(date +%s.%N); "$@" >/dev/null 2>&1; e=$(date +%s.%N); echo "$e - $s" | bc; }
for c in raw fixed entropy; do
	bytes=$(du -sb "$w/$c" | cut -f1)
	for tool in crane ${BASE:+base} splitzip splitzip-nosync; do
		ts=()
		for i in $(seq "$n"); do
			rm -rf "$w/out"
			case $tool in
			base) ts+=("$(timeit "$BASE" pull "$host/bench/m:$c" "$w/out" --insecure)") ;;
			crane) ts+=("$(timeit "$crane" pull --insecure --format oci "$host/bench/m:$c" "$w/out")") ;;
			splitzip) ts+=("$(timeit "$sz" pull "$host/bench/m:$c" "$w/out" --insecure ${PROFILE:+--cpuprofile "$PROFILE/$c-$i.prof"})") ;;
			splitzip-nosync) ts+=("$(timeit "$sz" pull "$host/bench/m:$c" "$w/out" --insecure --no-sync ${PROFILE:+--cpuprofile "$PROFILE/$c-nosync-$i.prof"})") ;;
			esac
		done
		m=$(printf '%s\n' "${ts[@]}" | median)
		printf '%-8s %-16s %6.3f s  %7.0f MB/s raw  (%d bytes of blobs; all: %s)\n' "$c" "$tool" "$m" "$(echo "$rawbytes / $m / 1000000" | bc -l)" "$bytes" "${ts[*]}"
	done
done
