"""Offload timings on the GPU machine (issue 13): a 128-token forward of a
0.9 B-parameter Llama-shaped model (hidden 2048, 16 layers, random init,
BF16, tied embeddings) fully resident, offloaded through splitzip (fixed,
entropy and raw caches; tiers cache, pinned and gpu; windows and prefetch
depths), and through accelerate's cpu_offload, same run; median of
repeated forwards after a warm-up, torch.cuda.synchronize around each;
the pinned and gpu tiers and the resident model also replayed from a
CUDA graph. Logits are compared with the resident model's. Usage:
python3 scripts/gpu-offload.py BIN WORKDIR."""

import os
import sys
import time

import torch
from transformers import AutoModelForCausalLM

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
from splitzip.offload import offload  # noqa: E402
from splitzip.transformers import from_pretrained  # noqa: E402
from offloadbench import graph_timed, small_llama, timed  # noqa: E402

BIN, WORK = sys.argv[1], sys.argv[2]
src, caches, cfg = small_llama(BIN, WORK)
ids = torch.randint(0, 32000, (1, 128), device="cuda:0")
step = ids[:, :1]


nparams = sum(p.numel() for p in AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16).parameters())
print(f"model: {nparams / 1e9:.3f} B parameters, {2 * nparams / 1e9:.2f} GB BF16; caches: " +
      ", ".join(f"{k} {sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(v) for f in fs) / 1e9:.2f} GB"
                for k, v in caches.items()))
resident = from_pretrained(caches["fixed"], src)
ms, want = timed(resident, ids, 20)
ms1, want1 = timed(resident, step, 20)
gms, gout = graph_timed(resident, ids, 20)
gms1, _ = graph_timed(resident, step, 20)
print(f"resident: 128 tokens {ms:.2f} ms, 1 token {ms1:.2f} ms; graph replay: 128 tokens {gms} ms, 1 token {gms1} ms")
want_nc = gout if gms is not None else None
del resident
torch.cuda.empty_cache()
for codec, tier in (("fixed", "cache"), ("fixed", "pinned"), ("fixed", "gpu"), ("raw", "cache"), ("raw", "pinned"),
                    ("raw", "gpu"), ("entropy", "cache")):
    for window, prefetch in ((4, 2), (4, 3), (2, 1)):
        if tier == "gpu" and window != 4:
            continue
        t0 = time.perf_counter()
        m = offload(caches[codec], src, window=window, prefetch=prefetch, tier=tier)
        setup = time.perf_counter() - t0
        ms, got = timed(m, ids, 10)
        ms1, _ = timed(m, step, 10)
        o = m.splitzip_offload
        st = o.stats
        same = torch.equal(got, want)
        held = {k: round(v.held / 1e9, 3) for k, v in st.tiers.items() if v.layers}
        line = (f"splitzip offload {codec}, tier {tier}, window {window} of 16 layers, prefetch {prefetch}: "
                f"128 tokens {ms:.2f} ms, 1 token {ms1:.2f} ms; logits equal {same}; {st.uploads} faults, "
                f"{st.bytes / 1e9:.2f} GB, host waited {st.waited_s * 1e3:.0f} ms; held GB {held}; setup {setup:.2f} s")
        if tier != "cache" and prefetch == 2:
            gms, gout = graph_timed(m, ids, 10)
            gms1, _ = graph_timed(m, step, 10)
            if gms is None:
                line += f"; graph: {gout!r}"
            else:
                line += (f"; graph replay 128 tokens {gms:.2f} ms (logits equal {torch.equal(gout, want_nc) if want_nc is not None else '?'}), "
                         f"1 token {gms1:.2f} ms")
        print(line, flush=True)
        o.close()
        del m, o
        torch.cuda.empty_cache()
from accelerate import cpu_offload  # noqa: E402
cpu = AutoModelForCausalLM.from_pretrained(src, dtype=torch.bfloat16).eval()
cpu_offload(cpu, execution_device=torch.device("cuda:0"))
ms, got = timed(cpu, ids, 5)
ms1, _ = timed(cpu, step, 5)
print(f"accelerate cpu_offload: 128 tokens {ms:.2f} ms, 1 token {ms1:.2f} ms; logits equal {torch.equal(got, want)}")
