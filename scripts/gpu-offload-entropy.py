"""Pinned-tier offload of the 8 B-parameter Llama shape (offloadbench.llama8b:
16 GB of random N(0, 0.02) BF16 weights) from a fixed cache and from an
entropy cache (compress --codec entropy), whose pinned packs keep their
entropy payloads (SZ_PACK_ENTROPY): both offloads held at once (window 4
of 32 layers, prefetch 2), 128-token eager forwards timed in turns
(offloadbench.interleaved), the two offloads' logits compared (each is
exact, so they must be equal). ROUNDS (default 4) rounds of 5 forwards.
Usage: python3 scripts/gpu-offload-entropy.py BIN WORKDIR."""

import os
import subprocess
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
from splitzip.offload import offload  # noqa: E402
from offloadbench import interleaved, llama8b, ratio_line, timed  # noqa: E402

BIN, WORK = sys.argv[1], sys.argv[2]
src, fixed, cfg = llama8b(BIN, WORK)
ent = os.path.join(WORK, "entropy")
if not os.path.exists(ent):
    t0 = time.perf_counter()
    subprocess.run([BIN, "compress", os.path.join(src, "model.safetensors.index.json"), "-o", ent, "--codec", "entropy",
                    "--no-sync", "-q"], check=True, stdout=subprocess.DEVNULL)
    print(f"compressed (entropy) in {time.perf_counter() - t0:.1f} s", flush=True)
torch.manual_seed(1)
x = torch.randint(0, cfg.vocab_size, (1, 128), device="cuda:0")
models = {}
try:
    for name, cache in (("fixed", fixed), ("entropy", ent)):
        t0 = time.perf_counter()
        models[name] = offload(cache, src, window=4, prefetch=2, tier="pinned")
        o = models[name].splitzip_offload
        kept = sum(info.entropy_count for _, info in o.packs)
        print(f"{name}: built in {time.perf_counter() - t0:.1f} s; pinned packs {o.stats.tiers['pinned'].held / 1e9:.2f} GB, "
              f"{kept} entropy payloads kept", flush=True)
    outs = {name: timed(m, x, 1)[1] for name, m in models.items()}
    equal = torch.equal(outs["fixed"], outs["entropy"])
    print(f"logits of the two offloads equal: {equal}", flush=True)
    times = interleaved(models, x, rounds=int(os.environ.get("ROUNDS", "4")), n=5)
    print(ratio_line(times, "fixed"), flush=True)
    for m in models.values():
        m.splitzip_offload.check()
    if not equal:
        sys.exit("the offloads' logits differ")
finally:
    for m in models.values():
        m.splitzip_offload.close()
