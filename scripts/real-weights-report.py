#!/usr/bin/env python3
"""Per-model statistics of the real-weights set for docs/PERF.md.

    scripts/real-weights-report.py SPLITZIP-BINARY SET-DIR

Compresses each checkpoint of the set (scripts/real-weights.sh) into a
temporary cache and prints one Markdown table row per model: parameters,
tensors, BF16 tensors compressed, bits per value of the compressed
tensors and of all BF16 bytes, escape rate, tensors left raw and why, and
a histogram of tensor sizes. Standard library only.
"""
import collections
import json
import os
import subprocess
import sys
import tempfile


def main():
    binary, root = sys.argv[1], sys.argv[2]
    buckets = [(4 << 10, "<4K"), (64 << 10, "4-64K"), (1 << 20, "64K-1M"), (16 << 20, "1-16M"), (1 << 62, ">16M")]
    print("| model | parameters | tensors | BF16 compressed | bits/value (compressed) | bits/value (all BF16) | escape rate | tensor sizes | left raw (BF16) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name in sorted(os.listdir(root)):
        src = os.path.join(root, name)
        if not os.path.exists(os.path.join(src, "model.safetensors.index.json")):
            continue
        with tempfile.TemporaryDirectory() as d:
            cache = os.path.join(d, "c")
            subprocess.run([binary, "compress", src, "-o", cache, "--no-sync", "-q"], check=True, stdout=subprocess.DEVNULL)
            ins = json.loads(subprocess.run([binary, "inspect", cache, "--json", "--tensors"], check=True, capture_output=True).stdout)
        ts = ins["tensors"]
        params = sum(t["values"] if t["dtype"] == "BF16" else 0 for t in ts)
        comp = [t for t in ts if t["stored"] == "splitzip"]
        cv = sum(t["values"] for t in comp)
        cb = sum(t["stored_bytes"] for t in comp)
        bf = [t for t in ts if t["dtype"] == "BF16"]
        esc = sum(t["escape_rate"] * t["values"] for t in comp) / max(cv, 1)
        hist = collections.Counter()
        for t in ts:
            for lim, label in buckets:
                if t["raw_bytes"] < lim:
                    hist[label] += 1
                    break
        reasons = collections.Counter()
        for t in bf:
            if t["stored"] != "splitzip":
                r = t.get("reason", "?")
                reasons["saving below gate" if "below" in r else r.split(" (")[0]] += 1
        tot = ins["sources"][0]["totals"]
        print("| %s | %.2fM BF16 | %d | %d of %d | %.3f | %.3f | %.3f%% | %s | %s |" % (
            name, params / 1e6, len(ts), len(comp), len(bf), 8 * cb / max(cv, 1),
            16 * tot["bf16_stored_bytes"] / max(tot["bf16_raw_bytes"], 1), 100 * esc,
            ", ".join("%s: %d" % (l, hist[l]) for _, l in buckets if hist[l]),
            ", ".join("%s: %d" % kv for kv in reasons.most_common()) or "none"))


if __name__ == "__main__":
    main()
