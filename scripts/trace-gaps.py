#!/usr/bin/env python3
"""Where a profiled forward waits: reads Chrome traces that
torch.profiler wrote (scripts/offload-profile.py with TRACE=DIR, plain or
gzipped) and prints, for each, per CUDA stream the kernels' busy time
and the stream's idle gaps, the host calls that blocked longest
(synchronizations), and how long kernels waited between their launch
call and their start (queued behind other work: the device is the
bottleneck; near zero: the host is). No torch needed.

    python3 scripts/trace-gaps.py TRACE.json[.gz] ... [--gap-us 20]
"""

import argparse
import collections
import gzip
import json
import statistics


def load(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        data = json.load(f)
    return data["traceEvents"] if isinstance(data, dict) else data


def analyse(events, gap_us, top):
    spans = [e for e in events if e.get("ph") == "X" and "dur" in e]
    kernels = [e for e in spans if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    calls = [e for e in spans if e.get("cat") in ("cuda_runtime", "cuda_driver")]
    if not kernels:
        return ["no kernels in this trace"]
    lines = []
    t0 = min(e["ts"] for e in spans)
    t1 = max(e["ts"] + e["dur"] for e in spans)
    lines.append(f"span {(t1 - t0) / 1e3:.2f} ms, {len(kernels)} device activities, {len(calls)} API calls")
    by_stream = collections.defaultdict(list)
    for k in kernels:
        by_stream[k.get("args", {}).get("stream", k.get("tid"))].append(k)
    launch = {}
    for c in calls:
        cid = c.get("args", {}).get("correlation")
        if cid is not None:
            launch[cid] = c
    for stream, ks in sorted(by_stream.items(), key=lambda kv: -len(kv[1])):
        ks.sort(key=lambda e: e["ts"])
        busy = sum(k["dur"] for k in ks)
        names = collections.Counter()
        for k in ks:
            names[k["name"][:60]] += k["dur"]
        gaps = []
        for a, b in zip(ks, ks[1:]):
            g = b["ts"] - (a["ts"] + a["dur"])
            if g >= gap_us:
                gaps.append((g, a, b))
        waits = []
        for k in ks:
            c = launch.get(k.get("args", {}).get("correlation"))
            if c is not None:
                waits.append(k["ts"] - (c["ts"] + c["dur"]))
        lines.append(f"stream {stream}: {len(ks)} activities, busy {busy / 1e3:.2f} ms "
                     f"({ks[0]['ts'] - t0:.0f}-{ks[-1]['ts'] + ks[-1]['dur'] - t0:.0f} us), "
                     f"{len(gaps)} gaps >= {gap_us} us totalling {sum(g for g, _, _ in gaps) / 1e3:.2f} ms")
        if waits:
            q = statistics.quantiles(waits, n=10) if len(waits) >= 2 else waits * 9
            lines.append(f"  launch to start: median {statistics.median(waits):.1f} us, "
                         f"p10 {q[0]:.1f}, p90 {q[-1]:.1f}, max {max(waits):.1f}")
        for name, d in names.most_common(4):
            lines.append(f"  {d / 1e3:8.3f} ms  {name}")
        for g, a, b in sorted(gaps, key=lambda x: -x[0])[:top]:
            lines.append(f"  gap {g:8.1f} us at {a['ts'] + a['dur'] - t0:9.1f}: after {a['name'][:40]!r}, "
                         f"before {b['name'][:40]!r}")
    blocked = collections.defaultdict(list)
    for c in calls:
        blocked[c["name"]].append(c["dur"])
    lines.append("API calls by total host time:")
    for name, ds in sorted(blocked.items(), key=lambda kv: -sum(kv[1]))[:top]:
        lines.append(f"  {sum(ds) / 1e3:8.3f} ms  {len(ds):5d} calls  max {max(ds):8.1f} us  {name}")
    return lines


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("traces", nargs="+")
    ap.add_argument("--gap-us", type=float, default=20.0, help="report idle gaps of a stream at least this long")
    ap.add_argument("--top", type=int, default=8)
    args = ap.parse_args()
    for path in args.traces:
        print(f"== {path}")
        for line in analyse(load(path), args.gap_us, args.top):
            print(line)


if __name__ == "__main__":
    main()
