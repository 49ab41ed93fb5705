#!/usr/bin/env bash
# Where a load's host time goes, on the GPU machine: compresses SRC with
# D/splitzip (CODECS, default "entropy fixed"), then for each cache and
# raw: a load of REPEAT (default 50) faults with a CPU profile
# ($OUT/prof-CODEC.pprof; read it here with go tool pprof -top), its JSON
# report ($OUT/load-CODEC.json: time summed by stage, tensors by path),
# and one with --device-times (the device's copy and decode times).
#   [BIN=NAME] scripts/gpu-load-profile.sh D SRC
set -uo pipefail
D=$1 SRC=$2
B=${BIN:-splitzip} # the binary of D to run
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
C=/tmp/profile-cache
for codec in ${CODECS:-entropy fixed}; do
	rm -rf "$C.$codec"
	"$D/$B" compress "$SRC" -o "$C.$codec" --codec "$codec" --no-sync -q >/dev/null || { echo "compress $codec failed"; exit 1; }
done
cat "$SRC"/* "$C".*/objects/*/* >/dev/null 2>&1
for codec in raw ${CODECS:-entropy fixed}; do
	c=$C.${codec/raw/${CODECS%% *}}
	flag=""
	[ "$codec" = raw ] && flag=--raw
	echo "=== $codec"
	"$D/$B" load "$c" $flag --repeat "${REPEAT:-50}" --cpuprofile "$OUT/prof-$codec.pprof" --json >"$OUT/load-$codec.json" || echo "load $codec failed"
	python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); g=[x["gb_per_s"] for x in r["runs"]]; print("runs %d: first %.1f GB/s, median %.1f; summed: read %.1f ms, verify %.1f ms, submit %.1f ms; paths %s" % (len(g), g[0], sorted(g)[len(g)//2], r.get("read_ns",0)/1e6, r.get("verify_ns",0)/1e6, r.get("submit_ns",0)/1e6, {k:v["tensors"] for k,v in r.get("paths",{}).items()}))' "$OUT/load-$codec.json" 2>&1 | tail -1
	"$D/$B" load "$c" $flag --repeat 5 --device-times | grep -iE "device|copy|decode|scatter" | head -8
done
