#!/usr/bin/env python3
"""Load and generation timings through transformers, on a GPU machine
with torch, transformers and accelerate: the numbers of
docs/TRANSFORMERS.md.

1. Load: transformers' from_pretrained(folder, device_map="cuda:0")
   against splitzip.transformers.from_pretrained(cache, folder) for
   models of 1.4 GiB and more (Llama- and Mixtral-shaped, random BF16
   weights N(0, 0.02), files in page cache), fixed and entropy caches;
   median of --repeat after one warm-up each; state dicts checked equal.
2. Generation: greedy model.generate on a resident model, on the same
   model offloaded (splitzip.offload, tiers pinned and gpu, window 2) and
   under accelerate's cpu_offload, with dynamic and static caches at
   batch 1 and 8: tokens per second, and offloaded tokens equal to the
   resident ones (a failure otherwise).

    python3 scripts/hf-bench.py --bin .dev/splitzip --out $OUT [--parts load,forward,generate]

Writes bench.json and prints a table.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "python"))

import torch  # noqa: E402
import transformers  # noqa: E402
from transformers import AutoConfig, AutoModelForCausalLM  # noqa: E402

from offloadbench import interleaved, ratio_line, save_random, timed_generate  # noqa: E402
from splitzip.offload import offload  # noqa: E402
from splitzip.transformers import from_pretrained  # noqa: E402


def median_time(fn, repeat):
    fn()  # warm-up: page cache, CUDA context, allocator
    ts = []
    for _ in range(repeat):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        out = fn()
        torch.cuda.synchronize()
        ts.append(time.perf_counter() - t0)
        del out
        torch.cuda.empty_cache()
    return statistics.median(ts), min(ts), max(ts)


def equal_states(a, b):
    sa, sb = a.state_dict(), b.state_dict()
    return set(sa) == set(sb) and all(torch.equal(sa[k], sb[k]) for k in sa)


def load_bench(name, cfg, args, tmp, out):
    src = os.path.join(tmp, name)
    size = save_random(cfg, src)
    row = {"model": name, "bytes": size}
    t = median_time(lambda: AutoModelForCausalLM.from_pretrained(src, device_map="cuda:0"), args.repeat)
    row["transformers_s"] = t
    ref = AutoModelForCausalLM.from_pretrained(src, device_map="cuda:0")
    for codec in ("fixed", "entropy"):
        cache = os.path.join(tmp, f"{name}.{codec}")
        subprocess.run([args.bin, "compress", src, "-o", cache, "--codec", codec, "--no-sync", "-q"], check=True,
                       stdout=subprocess.DEVNULL)
        t = median_time(lambda: from_pretrained(cache, src, device_map="cuda:0"), args.repeat)
        row[f"{codec}_s"] = t
        row[f"{codec}_speedup"] = row["transformers_s"][0] / t[0]
        got = from_pretrained(cache, src, device_map="cuda:0")
        row[f"{codec}_equal"] = equal_states(ref, got)
        del got
    del ref
    torch.cuda.empty_cache()
    out.append(row)
    print(json.dumps(row), flush=True)
    return src


def forward_bench(name, src, cache, out, rounds=5):
    """A 128-token eager forward (batch 1): resident against offloaded
    (window 4, prefetch 2; tiers gpu and pinned) and the gpu tier with a
    window as long as the model (every layer stays in its slot: the
    hooks' cost without faults), all held at once and timed in turns
    (offloadbench.interleaved: the host's speed drifts from run to run),
    rounds rounds. Each offloaded variant reports its hooks' host time a
    forward and whether its logits, after the timed forwards, equal the
    resident model's."""
    torch.manual_seed(5)
    ids = torch.randint(0, 1000, (1, 128), device="cuda:0")
    layers = AutoConfig.from_pretrained(src).num_hidden_layers
    n = 5  # forwards a model a round, after one
    models = {"resident": AutoModelForCausalLM.from_pretrained(src, device_map="cuda:0")}
    try:
        for tier, window in (("gpu", 4), ("pinned", 4), ("gpu-all-slots", layers)):
            models[tier] = offload(cache, src, window=window, prefetch=2, tier=tier.split("-")[0])
        hooks = {k: m.splitzip_offload.stats.hooks_s for k, m in models.items() if k != "resident"}
        times = interleaved(models, ids, rounds, n, use_cache=False)
        with torch.no_grad():  # after the slots have cycled: steady-state forwards compared
            logits = {k: m(ids, use_cache=False).logits for k, m in models.items()}
        print(ratio_line(times, "resident"), flush=True)
        row = {"model": name, "rounds": rounds, "resident_ms": times["resident"]}
        for k, m in models.items():
            if k == "resident":
                continue
            row[f"{k}_ms"] = times[k]
            row[f"{k}_ratio"] = [t / r for t, r in zip(times[k], times["resident"])]
            row[f"{k}_equal"] = bool(torch.equal(logits["resident"], logits[k]))
            row[f"{k}_hooks_ms"] = (m.splitzip_offload.stats.hooks_s - hooks[k]) * 1e3 / (rounds * (n + 1))
    finally:
        for k, m in models.items():
            if k != "resident":
                m.splitzip_offload.close()
        del models
        torch.cuda.empty_cache()
    out.append(row)
    print(json.dumps(row), flush=True)


def gen_bench(name, src, cache, args, out):
    torch.manual_seed(3)
    runs = []
    for batch in (1, 8):
        ids = torch.randint(0, 1000, (batch, 16), device="cuda:0")
        for impl in ("dynamic", "static"):
            kw = dict(max_new_tokens=args.tokens, do_sample=False, min_new_tokens=args.tokens)
            if impl == "static":
                kw["cache_implementation"] = "static"
                kw["disable_compile"] = True  # eager beside eager: transformers would compile a static cache's forward
            res = AutoModelForCausalLM.from_pretrained(src, device_map="cuda:0")
            want, t_res = timed_generate(res, ids, kw)
            del res
            torch.cuda.empty_cache()
            row = {"model": name, "batch": batch, "cache": impl, "resident_tok_s": batch * args.tokens / t_res}
            for tier in ("pinned", "gpu"):
                m = offload(cache, src, window=2, prefetch=1, tier=tier)
                try:
                    got, t = timed_generate(m, ids, kw)
                    row[f"{tier}_tok_s"] = batch * args.tokens / t
                    row[f"{tier}_equal"] = bool(torch.equal(want, got))
                except Exception as e:  # noqa: BLE001 - reported as the row's failure
                    row[f"{tier}_error"] = f"{type(e).__name__}: {str(e)[:200]}"
                finally:
                    m.splitzip_offload.close()
                    del m
                    torch.cuda.empty_cache()
            if batch == 1 and impl == "dynamic":
                from accelerate import cpu_offload
                cpu = AutoModelForCausalLM.from_pretrained(src, dtype=torch.bfloat16)
                cpu_offload(cpu, execution_device=torch.device("cuda:0"))
                got, t = timed_generate(cpu, ids, kw, warm=False)
                row["accelerate_tok_s"] = batch * args.tokens / t
                row["accelerate_equal"] = bool(torch.equal(want, got))
                del cpu
            runs.append(row)
            print(json.dumps(row), flush=True)
    out.extend(runs)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.path.join(ROOT, ".dev", "splitzip"))
    ap.add_argument("--out", default=os.environ.get("OUT", "/tmp/out"))
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--parts", default="load,forward,generate",
                    help="comma-separated: load (1.5 GiB models), forward (offloaded 128-token forwards), generate")
    ap.add_argument("--tag", default="", help="written to bench-TAG.json instead of bench.json")
    args = ap.parse_args()
    loads, gens, fwds = [], [], []
    llama = transformers.LlamaConfig(vocab_size=32000, hidden_size=2048, intermediate_size=5632, num_hidden_layers=12,
                                     num_attention_heads=16, num_key_value_heads=4, max_position_embeddings=2048)
    mixtral = transformers.MixtralConfig(vocab_size=32000, hidden_size=1024, intermediate_size=3584,
                                         num_hidden_layers=8, num_attention_heads=16, num_key_value_heads=4,
                                         num_local_experts=8, num_experts_per_tok=2, max_position_embeddings=2048)
    small = transformers.MixtralConfig(vocab_size=1000, hidden_size=256, intermediate_size=512, num_hidden_layers=6,
                                       num_attention_heads=8, num_key_value_heads=4, num_local_experts=8,
                                       num_experts_per_tok=2, max_position_embeddings=512)
    small_llama = transformers.LlamaConfig(vocab_size=1000, hidden_size=256, intermediate_size=688, num_hidden_layers=6,
                                           num_attention_heads=8, num_key_value_heads=4, max_position_embeddings=512)
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_TMP")) as tmp:
        parts = set(args.parts.split(","))
        if parts & {"load", "forward"}:
            src = os.path.join(tmp, "llama-1.5GiB")
            if "load" in parts:
                load_bench("llama-1.5GiB", llama, args, tmp, loads)
            else:
                save_random(llama, src)
                subprocess.run([args.bin, "compress", src, "-o", src + ".fixed", "--no-sync", "-q"], check=True,
                               stdout=subprocess.DEVNULL)
            if "forward" in parts:
                forward_bench("llama-1.5GiB", src, src + ".fixed", fwds)
        if "load" in parts:
            load_bench("mixtral-1.6GiB", mixtral, args, tmp, loads)
        for name, cfg in (("llama-small", small_llama), ("mixtral-small", small)) if "generate" in parts else ():
            src = os.path.join(tmp, name)
            save_random(cfg, src)
            cache = os.path.join(tmp, f"{name}.fixed")
            subprocess.run([args.bin, "compress", src, "-o", cache, "--no-sync", "-q"], check=True,
                           stdout=subprocess.DEVNULL)
            gen_bench(name, src, cache, args, gens)
    meta = {"transformers": transformers.__version__, "torch": torch.__version__,
            "gpu": torch.cuda.get_device_name(0), "date": time.strftime("%Y-%m-%d")}
    with open(os.path.join(args.out, f"bench-{args.tag}.json" if args.tag else "bench.json"), "w") as f:
        json.dump({"meta": meta, "load": loads, "forward": fwds, "generate": gens}, f, indent=1)
    bad = [r for r in gens if not all(r.get(f"{t}_equal", False) for t in ("pinned", "gpu"))]
    bad += [r for r in loads if not (r["fixed_equal"] and r["entropy_equal"])]
    bad += [r for r in fwds if not (r["gpu_equal"] and r["pinned_equal"] and r["gpu-all-slots_equal"])]
    print(f"{len(bad)} rows with differences or errors")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
