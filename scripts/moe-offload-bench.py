#!/usr/bin/env python3
"""Batch-1 decoding of a Mixtral-shaped model of about 8.8 GiB (hidden
2048, intermediate 5632, 16 layers of 8 experts, top 2; random BF16
weights N(0, 0.02), seed 0) on the GPU machine: greedy model.generate
of --tokens tokens after a 16-token prompt, tokens per second of

- the resident model (transformers' from_pretrained to cuda:0),
- splitzip.offload with whole layers (tier pinned, window 2, prefetch 1),
- splitzip.offload with experts= (window 16: the layers' other
  parameters resident after their first fault; experts faulted in one
  at a time into one set of expert rows; GPU memory for experts, pool
  and rows, at most --resident of all experts' raw bytes), the routing
  read on the host, without prediction (the default) and prefetching
  the likeliest 1 or 2 experts a token, and the routing decided on the
  device (expert_routing="device"),
- accelerate's cpu_offload (one timed generation of --accel-tokens),

each variant's tokens checked equal to the resident model's (a failure
otherwise), median of --repeat after a warm-up generation. Fixed cache.
The -graph variants decode with each step replayed from a CUDA graph
over a static cache (offloadbench.graph_decode; experts_implementation
--graph-experts, which capture allows), the resident model and the
device-routed offload, whose tokens must equal the resident graph's.

    python3 scripts/moe-offload-bench.py --bin .dev/splitzip --out $OUT [--work DIR]

Writes moe.json and prints one JSON line a variant and a table.

With --interleave R the resident model, the whole-layer offload and the
host-routed expert offload are held at once and timed in turns instead:
R rounds, each one timed generation of every model (after a warm-up
generation each; with --entropy also whole layers and experts= from an
entropy cache, whose pinned packs keep their entropy payloads), so that
a host whose speed drifts during the run
(eager decoding is bound by its kernel launches) slows all of them
alike; each round's ratios to the resident model are printed, and the
tokens of every generation are checked against the resident model's.
Writes moe-turns.json.
"""

import argparse
import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "python"))

import torch  # noqa: E402
import transformers  # noqa: E402
from transformers import AutoModelForCausalLM  # noqa: E402

from offloadbench import graph_decode, save_random, timed_generate  # noqa: E402
from splitzip.offload import offload  # noqa: E402

WINDOW = 2  # whole-layer offload


def config():
    return transformers.MixtralConfig(vocab_size=32000, hidden_size=2048, intermediate_size=5632,
                                      num_hidden_layers=16, num_attention_heads=16, num_key_value_heads=4,
                                      num_local_experts=8, num_experts_per_tok=2, max_position_embeddings=2048)


def make(cfg, src, bin_, cache, codec="fixed"):
    if not os.path.exists(os.path.join(src, "config.json")):
        save_random(cfg, src)
    if not os.path.exists(cache):
        t0 = time.perf_counter()
        subprocess.run([bin_, "compress", src, "-o", cache, "--codec", codec, "--no-sync", "-q"], check=True,
                       stdout=subprocess.DEVNULL)
        print(f"compress {codec}: {time.perf_counter() - t0:.1f} s", file=sys.stderr)


def turns(args, cfg, src, cache, pool, ids, kw):
    """--interleave: the three models (with --entropy five: whole layers
    and experts= from an entropy cache, whose pinned packs keep their
    entropy payloads) held at once, timed in turns (--repeat and --skip
    do not apply)."""
    models = {"resident": AutoModelForCausalLM.from_pretrained(src, device_map="cuda:0").eval()}
    try:
        models["layers"] = offload(cache, src, prefetch=1, tier="pinned", window=WINDOW)
        models["experts"] = offload(cache, src, prefetch=1, tier="pinned", window=cfg.num_hidden_layers, experts=pool)
        if args.entropy:
            ecache = os.path.join(args.work, "entropy")
            make(cfg, src, args.bin, ecache, "entropy")
            models["layers-entropy"] = offload(ecache, src, prefetch=1, tier="pinned", window=WINDOW)
            models["experts-entropy"] = offload(ecache, src, prefetch=1, tier="pinned", window=cfg.num_hidden_layers,
                                                experts=pool)
        timed_turns(args, models, ids, kw)
    finally:
        for m in models.values():
            o = getattr(m, "splitzip_offload", None)
            if o is not None:
                o.close()


def timed_turns(args, models, ids, kw):
    """Times models (the resident one first) in args.interleave rounds of
    one generation each after a warm-up, prints and writes each round's
    ratios, and exits with an error if any generation's tokens differ from
    the resident model's."""
    times = {name: [] for name in models}
    want, unequal = None, []
    with torch.no_grad():
        for name, m in models.items():
            got = m.generate(ids, **kw)  # warm-up
            if want is None:
                want = got
            elif not torch.equal(want, got):
                unequal.append(name)
        for r in range(args.interleave):
            order = list(models.items())
            if r % 2:
                order.reverse()
            for name, m in order:
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                got = m.generate(ids, **kw)
                torch.cuda.synchronize()
                times[name].append(args.tokens / (time.perf_counter() - t0))
                if not torch.equal(want, got):
                    unequal.append(name)
    rows = []
    for name, ts in times.items():
        rs = [t / b for t, b in zip(ts, times["resident"])]
        layer_rs = [t / b for t, b in zip(ts, times["layers"])]
        row = {"variant": name, "tok_s": ts, "x_resident": rs, "x_layers": layer_rs}
        rows.append(row)
        print(f"{name:<10} tokens/s {', '.join(f'{t:.2f}' for t in ts)}; x resident {', '.join(f'{r:.3f}' for r in rs)} "
              f"(min {min(rs):.3f}); x layers {', '.join(f'{r:.2f}' for r in layer_rs)} (min {min(layer_rs):.2f})",
              flush=True)
    for name in ("experts", "experts-entropy"):
        if name in models:
            st = models[name].splitzip_offload.stats.experts
            print(f"{name}: {st.resident_fraction:.3f} of the experts' bytes in GPU memory, packs {st.pinned_bytes} "
                  f"bytes pinned; routed {st.routed}, pool hits {st.pool_hits}, copies {st.copies}, "
                  f"copied {st.copied_bytes} bytes", flush=True)
    st = models["experts"].splitzip_offload.stats.experts
    print(f"tokens equal to the resident model's in every generation: {not unequal} {sorted(set(unequal))}", flush=True)
    meta = {"transformers": transformers.__version__, "torch": torch.__version__,
            "gpu": torch.cuda.get_device_name(0), "date": time.strftime("%Y-%m-%d"), "tokens": args.tokens,
            "resident_cap": args.resident, "resident_fraction": st.resident_fraction, "rounds": args.interleave,
            "unequal": sorted(set(unequal))}
    with open(os.path.join(args.out, "moe-turns.json"), "w") as f:
        json.dump({"meta": meta, "rows": rows}, f, indent=1)
    if unequal:
        sys.exit(f"tokens differ from the resident model's: {sorted(set(unequal))}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.path.join(ROOT, ".dev", "splitzip"))
    ap.add_argument("--out", default=os.environ.get("OUT", "/tmp/out"))
    ap.add_argument("--work", default=os.environ.get("BENCH_TMP", "/tmp/moe-bench"))
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--accel-tokens", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--resident", type=float, default=0.25)
    ap.add_argument("--skip", default="", help="comma-separated variants to skip")
    ap.add_argument("--graph-experts", default="batched_mm", help="experts_implementation of the -graph variants")
    ap.add_argument("--interleave", type=int, default=0,
                    help="time resident, whole-layer and expert offload in turns, this many rounds")
    ap.add_argument("--entropy", action="store_true",
                    help="with --interleave: also experts= from an entropy cache (its packs keep the payloads)")
    args = ap.parse_args()
    if args.interleave < 0:
        ap.error("--interleave takes a number of rounds, 1 or more (0: time the variants one after another)")
    skip = set(filter(None, args.skip.split(",")))
    cfg = config()
    src, cache = os.path.join(args.work, "model"), os.path.join(args.work, "fixed")
    os.makedirs(args.work, exist_ok=True)
    make(cfg, src, args.bin, cache)
    expert = 3 * cfg.hidden_size * cfg.intermediate_size * 2
    experts = expert * cfg.num_local_experts * cfg.num_hidden_layers
    # GPU memory for experts: one set of rows (every expert of a layer)
    # and the pool, which gets what the cap leaves.
    pool = int(args.resident * experts) - cfg.num_local_experts * expert
    torch.manual_seed(3)
    ids = torch.randint(0, cfg.vocab_size, (1, 16), device="cuda:0")
    kw = dict(max_new_tokens=args.tokens, min_new_tokens=args.tokens, do_sample=False)
    rows, want = [], None

    def report(row):
        rows.append(row)
        print(json.dumps(row), flush=True)

    if args.interleave:
        return turns(args, cfg, src, cache, pool, ids, kw)
    res = AutoModelForCausalLM.from_pretrained(src, device_map="cuda:0").eval()
    size = sum(p.numel() * p.element_size() for p in res.parameters())
    want, t = timed_generate(res, ids, kw, n=args.repeat)
    report({"variant": "resident", "tok_s": args.tokens / t, "equal": True, "model_bytes": size})
    del res
    torch.cuda.empty_cache()
    gkw = {"experts_implementation": args.graph_experts}
    want_graph = None
    if "resident-graph" not in skip:
        res = AutoModelForCausalLM.from_pretrained(src, device_map="cuda:0", **gkw).eval()
        want_graph, t = graph_decode(res, ids, args.tokens, n=args.repeat)
        if want_graph is None:
            report({"variant": "resident-graph", "error": repr(t), "equal": False})
        else:
            report({"variant": "resident-graph", "tok_s": (args.tokens - 1) / t, "equal": True,
                    "same_as_eager": bool(torch.equal(want, want_graph))})
        del res
        torch.cuda.empty_cache()
    layers = cfg.num_hidden_layers
    variants = [("layers", {"window": WINDOW}),
                ("experts", {"window": layers, "experts": pool}),
                ("experts-device", {"window": layers, "experts": pool, "expert_routing": "device"}),
                ("experts-device-graph", dict(window=layers, experts=pool, expert_routing="device", **gkw)),
                ("experts-predict1", {"window": layers, "experts": pool, "expert_prefetch": 1}),
                ("experts-predict2", {"window": layers, "experts": pool, "expert_prefetch": 2})]
    for name, extra in variants:
        if name in skip or (name.endswith("-graph") and want_graph is None):
            continue
        t0 = time.perf_counter()
        m = offload(cache, src, prefetch=1, tier="pinned", **extra)
        built = time.perf_counter() - t0
        o = m.splitzip_offload
        try:
            if name.endswith("-graph"):
                got, t = graph_decode(m, ids, args.tokens, n=args.repeat)
                if got is None:
                    report({"variant": name, "error": repr(t), "equal": False})
                    continue
                row = {"variant": name, "tok_s": (args.tokens - 1) / t, "equal": bool(torch.equal(want_graph, got))}
                o.check()
            else:
                got, t = timed_generate(m, ids, kw, n=args.repeat)
                row = {"variant": name, "tok_s": args.tokens / t, "equal": bool(torch.equal(want, got))}
            row.update({"build_s": built, "layer_fault_bytes": o.stats.bytes,
                        "hooks_ms_per_token": o.stats.hooks_s * 1e3 / (args.tokens * (args.repeat + 1))})
            if o.experts is not None:
                st = o.stats.experts
                row.update({k: getattr(st, k) for k in (
                    "routed", "row_hits", "pool_hits", "prefetch_hits", "copies", "prefetches", "predicted",
                    "predicted_right", "copied_bytes",
                    "scattered_bytes", "buffers", "pool_bytes", "expert_bytes", "resident_fraction")})
            report(row)
        finally:
            o.close()
            del m, o
            torch.cuda.empty_cache()
    if "accelerate" not in skip:
        from accelerate import cpu_offload
        cpu = AutoModelForCausalLM.from_pretrained(src, dtype=torch.bfloat16).eval()
        cpu_offload(cpu, execution_device=torch.device("cuda:0"))
        akw = dict(kw, max_new_tokens=args.accel_tokens, min_new_tokens=args.accel_tokens)
        got, t = timed_generate(cpu, ids, akw, warm=False)
        report({"variant": "accelerate", "tok_s": args.accel_tokens / t,
                "equal": bool(torch.equal(want[:, :got.shape[1]], got))})
        del cpu
    meta = {"transformers": transformers.__version__, "torch": torch.__version__,
            "gpu": torch.cuda.get_device_name(0), "date": time.strftime("%Y-%m-%d"), "tokens": args.tokens,
            "resident_cap": args.resident, "pool_budget": pool, "expert_bytes": experts}
    with open(os.path.join(args.out, "moe.json"), "w") as f:
        json.dump({"meta": meta, "rows": rows}, f, indent=1)
    by = {r["variant"]: r for r in rows}
    base = by["resident"]["tok_s"]
    gbase = by.get("resident-graph", {}).get("tok_s")
    print(f"{'variant':<22} {'tok/s':>8} {'x resident':>10} {'x res.graph':>11} {'x layers':>9} equal")
    for r in rows:
        if "tok_s" not in r:
            print(f"{r['variant']:<22} {r.get('error')}")
            continue
        lay = by.get("layers", {}).get("tok_s")
        print(f"{r['variant']:<22} {r['tok_s']:8.2f} {r['tok_s'] / base:10.3f} "
              f"{(r['tok_s'] / gbase) if gbase else float('nan'):11.3f} "
              f"{(r['tok_s'] / lay) if lay else float('nan'):9.2f} {r['equal']}")
    bad = [r["variant"] for r in rows if not r["equal"]]
    print(f"{len(bad)} variants with differences {bad}")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
