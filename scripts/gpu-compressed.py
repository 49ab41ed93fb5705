#!/usr/bin/env python3
"""The compressed residency (issue 36) on the Llama-3-8B shape, on the GPU
machine: the model offloaded with tier="compressed" (every linear layer
multiplied from its fixed payload by splitzip.nn's fused kernel) beside
the resident BF16 model (splitzip.transformers.from_pretrained), both in
GPU memory at once.

1. Memory: the linear weights' payload bytes against their BF16 bytes,
   and the GPU memory each model takes; also the model offloaded with
   linears="faster" (BF16 where the kernel is slower at batch 1 here).
2. Decode step: greedy decoding with each one-token step replayed from a
   CUDA graph over a static KV cache (offloadbench.graph_decode), batch 1
   and 8, the three models in turns (--rounds rounds of a 64-token decode,
   median of 2 after one); milliseconds a token.
3. Tokens: --prompts random 16-token prompts, --tokens greedy tokens each
   (graph decoding, batch 1), compressed against resident: where the
   first token differs, if one does.
4. model.generate with a static cache (eager, disable_compile), batch 1
   and 8, 32 tokens: tokens a second and whether the tokens equal the
   resident model's.

Random weights N(0, 0.02) make logits nearly flat, so greedy tokens of
the two models part at the first near-tie: the kernel rounds its sums in
another order than cuBLAS (within 2 BF16 ulps a product), which is why
(3) reports where they part rather than requiring equality.

    python3 scripts/gpu-compressed.py BIN WORKDIR [--prompts 10 --tokens 256] > log; writes $OUT/compressed.json
"""

import argparse
import json
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
from splitzip.offload import offload  # noqa: E402
from splitzip.transformers import from_pretrained  # noqa: E402
from offloadbench import graph_decode, llama8b, timed_generate  # noqa: E402


def first_difference(a, b):
    """The first index where token rows a and b (1-D, or one row in 2-D)
    differ, or None."""
    d = (a != b).nonzero()
    return None if d.numel() == 0 else int(d[0, -1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("bin")
    ap.add_argument("work")
    ap.add_argument("--prompts", type=int, default=10)
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", default=os.environ.get("OUT", "/tmp/out"))
    args = ap.parse_args()
    src, cache, cfg = llama8b(args.bin, args.work)
    report = {"gpu": torch.cuda.get_device_name(0), "date": time.strftime("%Y-%m-%d")}

    m0 = torch.cuda.memory_allocated()
    t0 = time.perf_counter()
    res = from_pretrained(cache, src)
    report["resident_load_s"] = time.perf_counter() - t0
    m1 = torch.cuda.memory_allocated()
    t0 = time.perf_counter()
    comp = offload(cache, src, tier="compressed")
    report["compressed_setup_s"] = time.perf_counter() - t0
    m2 = torch.cuda.memory_allocated()
    fast = offload(cache, src, tier="compressed", linears="faster")
    m3 = torch.cuda.memory_allocated()
    of = fast.splitzip_offload
    print(f"linears='faster': GPU memory {(m3 - m2) / 1e9:.2f} GB ({(m3 - m2) / (m1 - m0):.3f} of resident); "
          f"{of.stats.layers} linears from payloads; timings (fused, BF16 us at batch 1) {of.timings}", flush=True)
    report.update(faster_gpu_bytes=m3 - m2, faster_linears=of.stats.layers,
                  faster_timings={f"{r}x{c}": t for (r, c), t in of.timings.items()})
    o = comp.splitzip_offload
    report.update(resident_gpu_bytes=m1 - m0, compressed_gpu_bytes=m2 - m1, linears=o.stats.layers,
                  payload_bytes=o.stats.held, linear_bf16_bytes=o.stats.raw, kept=o.kept)
    print(f"resident: load {report['resident_load_s']:.1f} s, GPU memory {(m1 - m0) / 1e9:.2f} GB; "
          f"compressed: setup {report['compressed_setup_s']:.1f} s, GPU memory {(m2 - m1) / 1e9:.2f} GB "
          f"({(m2 - m1) / (m1 - m0):.3f} of resident); {o.stats.layers} linears from payloads, "
          f"{o.stats.held / 1e9:.2f} GB for {o.stats.raw / 1e9:.2f} GB of BF16 weights "
          f"({o.stats.held / o.stats.raw:.3f}); kept BF16: {o.kept}", flush=True)

    models = {"resident": res, "compressed": comp, "faster": fast}
    vocab = cfg.vocab_size
    steps = {}
    for batch in (1, 8):
        g = torch.Generator(device="cuda:0").manual_seed(100 + batch)
        ids = torch.randint(0, vocab, (batch, 16), device="cuda:0", generator=g)
        per = {k: [] for k in models}
        for _ in range(args.rounds):
            for k, m in models.items():
                _, t = graph_decode(m, ids, 64, n=2)
                if not isinstance(t, float):
                    raise RuntimeError(f"{k}, batch {batch}: graph decoding failed: {t!r}")
                per[k].append(t / 63 * 1e3)
        ratio = [c / r for c, r in zip(per["compressed"], per["resident"])]
        fratio = [c / r for c, r in zip(per["faster"], per["resident"])]
        steps[batch] = {"resident_ms": per["resident"], "compressed_ms": per["compressed"], "ratio": ratio,
                        "faster_ms": per["faster"], "faster_ratio": fratio}
        print(f"graph decode step, batch {batch}: resident {', '.join(f'{t:.2f}' for t in per['resident'])} ms, "
              f"compressed {', '.join(f'{t:.2f}' for t in per['compressed'])} ms, linears='faster' "
              f"{', '.join(f'{t:.2f}' for t in per['faster'])} ms; compressed / resident "
              f"{', '.join(f'{r:.3f}' for r in ratio)}; faster / resident {', '.join(f'{r:.3f}' for r in fratio)}",
              flush=True)
    report["graph_step"] = steps

    parts = []
    for p in range(args.prompts):
        g = torch.Generator(device="cuda:0").manual_seed(1000 + p)
        ids = torch.randint(0, vocab, (1, 16), device="cuda:0", generator=g)
        a, ea = graph_decode(res, ids, args.tokens, n=0)
        b, eb = graph_decode(comp, ids, args.tokens, n=0)
        if a is None or b is None:
            raise RuntimeError(f"prompt {p}: graph decoding failed: {ea if a is None else eb!r}")
        k = first_difference(a[:, 16:], b[:, 16:])
        parts.append(k)
    same = sum(k is None for k in parts)
    report["prompts"] = {"tokens": args.tokens, "first_difference": parts, "identical": same}
    print(f"{args.prompts} prompts x {args.tokens} greedy tokens (graph decoding, batch 1): {same} identical; "
          f"first differing token of each: {parts}", flush=True)

    gens = []
    for batch in (1, 8):
        g = torch.Generator(device="cuda:0").manual_seed(200 + batch)
        ids = torch.randint(0, vocab, (batch, 16), device="cuda:0", generator=g)
        kw = dict(max_new_tokens=32, min_new_tokens=32, do_sample=False, cache_implementation="static",
                  disable_compile=True)
        row = {"batch": batch}
        outs = {}
        for k in ("resident", "compressed"):
            outs[k], t = timed_generate(models[k], ids, kw)
            row[f"{k}_tok_s"] = batch * 32 / t
        row["first_difference"] = [first_difference(outs["resident"][i, 16:], outs["compressed"][i, 16:])
                                   for i in range(batch)]
        gens.append(row)
        print(f"generate, static cache, eager, batch {batch}: resident {row['resident_tok_s']:.1f} tokens/s, "
              f"compressed {row['compressed_tok_s']:.1f}; first differing token of each row: "
              f"{row['first_difference']}", flush=True)
    report["generate"] = gens
    o.check()
    of.check()
    o.close()
    of.close()
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "compressed.json"), "w") as f:
        json.dump(report, f, indent=1)
    med = {b: statistics.median(v["ratio"]) for b, v in steps.items()}
    print(f"median decode-step ratio: batch 1 {med[1]:.3f}, batch 8 {med[8]:.3f}", flush=True)


if __name__ == "__main__":
    main()
