#!/usr/bin/env bash
# The load-time packing threshold in turns, on the GPU machine: first
# loads (bench load: raw beside compressed, in one process) with the
# default threshold (load.DefaultSmallBytes) and with 256 KiB
# (--small-bytes 262144, the default before 2026-12-06), 2 rounds each,
# on a 48-layer MoE, the 4,000-tensor size mix and an 8 GiB Llama shape
# (each loaded once with --check first), then on the real-weights
# checkpoints under RW (fixed and entropy caches).
#   scripts/gpu-pack-threshold.sh D [RW]    (D holds splitzip)
set -u
D=$1
RW=${2:-}
for ds in "moe --moe 64 --shards 8" "mix --mix 4000 --shards 4" "llama --size 8GiB --shards 4"; do
	set -- $ds
	name=$1
	shift
	"$D/splitzip" gen /tmp/$name "$@" -q && "$D/splitzip" compress /tmp/$name -o /tmp/$name.c --no-sync -q >/dev/null || { echo "FAILED gen $name"; continue; }
	cat /tmp/$name/* /tmp/$name.c/objects/*/* >/dev/null
	"$D/splitzip" load /tmp/$name.c --check | grep -E "matches" | head -1
	for r in 1 2; do
		for cfg in "" "--small-bytes 262144"; do
			echo "TH $name [${cfg:-default}] r$r: $("$D/splitzip" bench load /tmp/$name.c --rounds 2 $cfg | grep compare)"
		done
	done
	rm -rf /tmp/$name /tmp/$name.c
done
[ -n "$RW" ] || exit 0
for c in "$RW"/*/; do
	c=$(basename "$c")
	for codec in fixed entropy; do
		rm -rf /tmp/rw.c
		"$D/splitzip" compress "$RW/$c" -o /tmp/rw.c --codec $codec --no-sync -q >/dev/null || { echo "FAILED compress $c"; continue; }
		for r in 1 2; do
			for cfg in "" "--small-bytes 262144"; do
				echo "RW $c $codec [${cfg:-default}] r$r: $("$D/splitzip" bench load /tmp/rw.c --rounds 3 $cfg | grep compare)"
			done
		done
	done
done
rm -rf /tmp/rw.c
