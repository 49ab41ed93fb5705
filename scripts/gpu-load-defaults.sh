#!/usr/bin/env bash
# Load-default sweep on the GPU machine: bench load (raw and SplitZip
# alternating, page cache warm) of a 1.6 GB and a 6 GB generated checkpoint
# over --readers x --streams, once more with the defaults, and a summary
# that names the best setting per checkpoint and mode and how far the
# defaults are from it.   scripts/gpu-load-defaults.sh D  (D holds splitzip)
set -uo pipefail
cd "$(dirname "$0")/.."
D=$1
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
sz=$D/splitzip
exec > >(tee -a "$OUT/load-defaults.log") 2>&1
echo "nproc $(nproc); $(grep -c ^processor /proc/cpuinfo) processors; cgroup cpu.max: $(cat /sys/fs/cgroup/cpu.max 2>/dev/null)"
for size in 1600MB 6GB; do
  rm -rf /tmp/ck-$size /tmp/c-$size
  "$sz" gen /tmp/ck-$size --size $size --shards 4 -q
  "$sz" compress /tmp/ck-$size -o /tmp/c-$size --no-sync -q
  cat /tmp/ck-$size/* > /dev/null  # page cache warm
  for r in ${READERS:-2 4 8 16 32}; do
    for s in ${STREAMS:-1 2 4}; do
      "$sz" bench load /tmp/c-$size --readers $r --streams $s --rounds 3 --repeat 1 --json > /tmp/b.json 2>/dev/null || { echo "FAILED $size r=$r s=$s"; continue; }
      python3 - "$size" "r$r s$s" /tmp/b.json <<'PY'
import json, sys
d = json.load(open(sys.argv[3]))["summary"]
print("RESULT %s %-8s raw %6.1f splitzip %6.1f ratio %.3f" % (sys.argv[1], sys.argv[2], d["first_load_raw_gb_per_s"], d["first_load_splitzip_gb_per_s"], d["first_load_ratio"]))
PY
    done
  done
  "$sz" bench load /tmp/c-$size --rounds 3 --repeat 1 --json > /tmp/b.json && python3 - "$size" "default" /tmp/b.json <<'PY'
import json, sys
d = json.load(open(sys.argv[3]))
s = d["summary"]; rep = d["splitzip"][0]
print("RESULT %s %-8s raw %6.1f splitzip %6.1f ratio %.3f" % (sys.argv[1], sys.argv[2], s["first_load_raw_gb_per_s"], s["first_load_splitzip_gb_per_s"], s["first_load_ratio"]))
print("chosen:", {k: v for k, v in rep.items() if k in ("readers", "streams", "ahead", "settings")})
PY
  rm -rf /tmp/ck-$size /tmp/c-$size
done
python3 - "$OUT/load-defaults.log" <<'PY'
import re, sys
rows = [l.split() for l in open(sys.argv[1]) if l.startswith("RESULT")]
for size in sorted({r[1] for r in rows}):
    rs = [r for r in rows if r[1] == size]
    for mode, col in (("raw", 4), ("splitzip", 6)):
        best = max((float(r[col]), " ".join(r[2:-7] if False else r[2:r.index("raw")])) for r in rs if r[2] != "default")
        dflt = [float(r[col]) for r in rs if r[2] == "default"]
        if dflt:
            print("SUMMARY %s %s: best %.1f GB/s at %s; default %.1f GB/s (%.1f%% of best)" % (size, mode, best[0], best[1], dflt[0], 100 * dflt[0] / best[0]))
PY
