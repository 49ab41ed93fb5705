"""The pinned tier against raw pinned packs (issue 13's 1.25x target),
alternating, on the GPU machine: the 0.9 B Llama of
offloadbench.small_llama offloaded twice with tier pinned, window 4 of
16 layers, prefetch 2, once from its fixed-rate cache and once from a
cache of raw tensors; rounds of eager forwards of 128 tokens and 1 token
(median of 20 each), one model then the other, then graph replays of
each. Logits are compared between the two. ORDER=raw in the environment
times the raw model first in each round. Usage:
python3 scripts/gpu-offload-pinned.py BIN WORKDIR [rounds]."""

import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
from splitzip.offload import offload  # noqa: E402
from offloadbench import graph_timed, small_llama, timed  # noqa: E402

BIN, WORK = sys.argv[1], sys.argv[2]
rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 3
src, caches, _ = small_llama(BIN, WORK, ("fixed", "raw"))
ids = torch.randint(0, 32000, (1, 128), device="cuda:0")
order = ("raw", "fixed") if os.environ.get("ORDER") == "raw" else ("fixed", "raw")
models = {c: offload(caches[c], src, window=4, prefetch=2, tier="pinned") for c in order}
got = {}
for r in range(1, rounds + 1):
    ms = {}
    for c, m in models.items():
        ms[c], got[c] = timed(m, ids, 20)
        ms[c + "1"], _ = timed(m, ids[:, :1], 20)
    print(f"round {r} eager: fixed 128 tokens {ms['fixed']:.2f} ms, raw {ms['raw']:.2f} ms, "
          f"ratio {ms['raw'] / ms['fixed']:.3f}; 1 token fixed {ms['fixed1']:.2f}, raw {ms['raw1']:.2f}, "
          f"ratio {ms['raw1'] / ms['fixed1']:.3f}", flush=True)
print(f"logits equal: {torch.equal(got['fixed'], got['raw'])}")
for r in range(1, rounds + 1):
    g = {c: graph_timed(m, ids, 20)[0] for c, m in models.items()}
    if None in g.values():
        print(f"round {r} graph: capture failed {g}")
        break
    print(f"round {r} graph: fixed 128 tokens {g['fixed']:.2f} ms, raw {g['raw']:.2f} ms, ratio {g['raw'] / g['fixed']:.3f}",
          flush=True)
for m in models.values():
    m.splitzip_offload.close()
