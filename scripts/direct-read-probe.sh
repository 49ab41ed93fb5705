#!/usr/bin/env bash
# Cold reads of one large file, buffered against O_DIRECT (issue 34 item
# 4: whether direct reads beat the kernel's readahead on this host's
# disk), with dd: one stream and four streams over the file's quarters,
# the page cache dropped before each run (needs root). Prints GB/s.
#   scripts/direct-read-probe.sh FILE [BLOCK (default 8M)] [RUNS (default 2)]
set -euo pipefail
f=$1
bs=${2:-8M}
runs=${3:-2}
size=$(stat -c %s "$f")
blocks=$(( size / $(numfmt --from=iec "$bs") / 4 ))
drop() { sync; echo 3 > /proc/sys/vm/drop_caches; }
rate() { python3 -c "import sys; print('%.2f GB/s' % (int(sys.argv[1]) / (int(sys.argv[2]) / 1e9) / 1e9))" "$1" "$2"; }
for run in $(seq "$runs"); do
	for mode in buffered direct; do
		flag=""
		[ "$mode" = direct ] && flag="iflag=direct"
		drop
		s=$(date +%s%N)
		dd if="$f" of=/dev/null bs="$bs" $flag 2>/dev/null
		e=$(date +%s%N)
		echo "run $run, $mode, one stream: $(rate "$size" $((e - s)))"
		drop
		s=$(date +%s%N)
		for k in 0 1 2 3; do
			dd if="$f" of=/dev/null bs="$bs" $flag skip=$((k * blocks)) count="$blocks" 2>/dev/null &
		done
		wait
		e=$(date +%s%N)
		echo "run $run, $mode, four streams: $(rate $((4 * blocks * $(numfmt --from=iec "$bs"))) $((e - s)))"
	done
done
