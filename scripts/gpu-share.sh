#!/usr/bin/env bash
# One host copy per node (issue 35, item 4), on the GPU machine: a
# process holds the shared host copy of a checkpoint's payloads (`load
# --share --hold`); a second process loads with --share, attaching to it
# (its first load reads and checks no payload), beside a process with a
# private pinned copy (`load --resident`, whose repeats are the
# pinned-resident rate). Shmem in /proc/meminfo shows one copy. Datasets:
# an 8 GiB Llama shape (large tensors) and the 4,000-tensor size mix.
#   scripts/gpu-share.sh D        (D holds splitzip; logs to $OUT)
# DATASETS="llama" runs one of the two.
set -uo pipefail
cd "$(dirname "$0")/.."
D=$1
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/share.log") 2>&1
shmem() { awk '/^Shmem:/ {printf "%.2f GiB", $2/1048576}' /proc/meminfo; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for name in ${DATASETS:-llama mix}; do
	case $name in
	llama) set -- llama --size 8GiB --shards 4 ;;
	mix) set -- mix --mix 4000 --shards 4 ;;
	*) echo "unknown dataset $name" && continue ;;
	esac
	name=$1
	shift
	S=/tmp/sh-$name C=/tmp/sh-$name.c
	echo "=== $name: gen and compress ($(date +%T))"
	"$D/splitzip" gen $S "$@" -q && "$D/splitzip" compress $S -o $C --no-sync -q || { echo FAILED gen; continue; }
	cat $S/* $C/objects/*/* >/dev/null
	echo "=== $name: private pinned copy (load --resident --repeat 3)"
	"$D/splitzip" load $C --resident --repeat 3 | grep -E "run|pinned"
	"$D/splitzip" load $C --resident --resident-packs=false --repeat 3 | grep -E "run|pinned"
	echo "=== $name: holder (load --share --hold), Shmem before: $(shmem)"
	"$D/splitzip" load $C --share --hold 120s --check >$OUT/holder-$name.log 2>&1 &
	h=$!
	for _ in $(seq 240); do grep -q holding $OUT/holder-$name.log && break; sleep 0.5; done
	grep -E "run|shared|matches|holding" $OUT/holder-$name.log
	echo "Shmem with the holder: $(shmem)"
	for r in 1 2 3; do
		echo "--- $name: second process, round $r"
		"$D/splitzip" load $C --share --repeat 3 | grep -E "run|pinned|shared|summed"
		echo "Shmem: $(shmem)"
	done
	echo "--- $name: second process --check, and --json"
	"$D/splitzip" load $C --share --check | grep -E "matches|shared"
	"$D/splitzip" load $C --share --json --repeat 2 | python3 -c "import json,sys; d=json.load(sys.stdin); print('json: shared', d['shared'], 'pinned MiB', d['pinned_bytes']>>20, 'runs GB/s', [round(r['gb_per_s'],1) for r in d['runs']])"
	echo "--- $name: four processes at once, attached"
	pids=()
	for i in 1 2 3 4; do
		"$D/splitzip" load $C --share --repeat 2 >$OUT/four-$name-$i.log 2>&1 &
		pids+=($!)
	done
	wait "${pids[@]}"
	grep -hE "run|shared" $OUT/four-$name-*.log
	echo "Shmem with five processes done: $(shmem)"
	kill -INT $h; wait $h
	sleep 1
	echo "Shmem after the holder left: $(shmem)"
	rm -rf $S $C
done
echo "=== done $(date +%T)"
