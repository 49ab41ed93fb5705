"""Offload of an 8 B-parameter Llama on the GPU machine (issue 13): the
Llama-3-8B shape (hidden 4096, 32 layers, intermediate 14336, 8 key-value
heads, vocab 128256, untied head; random N(0, 0.02) BF16 weights written
straight to safetensors shards, 16 GB), compressed fixed-rate, then
forwards of 128 tokens and of 1 token (batch 1) resident, offloaded
through each tier with a window of 4 of its 32 layers, and through
accelerate's cpu_offload; eager and, for the pinned and gpu tiers and the
resident model, replayed from a CUDA graph. Median of a few forwards
after a warm-up; logits compared with the resident model's. In the
environment, TIERS (comma-separated, default gpu,pinned,cache) picks the
tiers, WINDOWS (comma-separated window:prefetch pairs, default 4:2) the
windows, INTERLEAVE=R adds R rounds timing the resident model and the
gpu tier's windows in turns (offloadbench.interleaved), ACCEL=0 skips
accelerate, STEPS=1 times each layer's start on
the host and on the device (offloadbench.steps), and TRACE=DIR writes a Chrome trace of
two eager forwards (128 tokens and 1 token) of the resident model and of
each tier (offloadbench.trace). Usage: python3 scripts/gpu-offload-8b.py
BIN WORKDIR."""

import os
import sys
import time

import torch
from transformers import AutoModelForCausalLM

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
from splitzip.offload import offload  # noqa: E402
from splitzip.transformers import from_pretrained  # noqa: E402
from offloadbench import graph_timed, interleaved, llama8b, ratio_line, steps, timed, trace  # noqa: E402

BIN, WORK = sys.argv[1], sys.argv[2]
src, cache, cfg = llama8b(BIN, WORK)


def size(d):
    return sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(d) for f in fs)


print(f"model {size(src) / 1e9:.2f} GB, cache {size(cache) / 1e9:.2f} GB", flush=True)
ids = torch.randint(0, 128256, (1, 128), device="cuda:0")
step = ids[:, :1]


def report(name, m, graph, want=None, n=5):
    ms, got = timed(m, ids, n, use_cache=False)
    ms1, _ = timed(m, step, n, use_cache=False)
    line = f"{name}: 128 tokens {ms:.1f} ms ({128e3 / ms:.0f} tokens/s), 1 token {ms1:.1f} ms ({1e3 / ms1:.1f} tokens/s)"
    if want is not None:
        line += f"; logits equal {torch.equal(got, want)}"
    if graph:
        gms, gout = graph_timed(m, ids, n)
        gms1, _ = graph_timed(m, step, n)
        line += (f"; graph: {gout!r}" if gms is None else
                 f"; graph replay 128 tokens {gms:.1f} ms, 1 token {gms1:.1f} ms ({1e3 / gms1:.1f} tokens/s)")
    print(line, flush=True)
    if os.environ.get("STEPS"):
        layers = m.model.layers
        print(f"  128 tokens: {steps(m, layers, ids, use_cache=False)}", flush=True)
        print(f"  1 token: {steps(m, layers, step, use_cache=False)}", flush=True)
    if os.environ.get("TRACE"):
        trace(m, ids, name + " 128", n=2, use_cache=False)
        trace(m, step, name + " 1", n=2, use_cache=False)
    return got


t0 = time.perf_counter()
res = from_pretrained(cache, src)
print(f"resident load {time.perf_counter() - t0:.2f} s", flush=True)
want = report("resident", res, True)
rounds = int(os.environ.get("INTERLEAVE", "0"))
if not rounds:
    del res
    torch.cuda.empty_cache()
for tier, wp in [(t, w) for t in os.environ.get("TIERS", "gpu,pinned,cache").split(",") if t
                 for w in os.environ.get("WINDOWS", "4:2").split(",")]:
    window, prefetch = map(int, wp.split(":"))
    t0 = time.perf_counter()
    m = offload(cache, src, window=window, prefetch=prefetch, tier=tier)
    o = m.splitzip_offload
    held = {k: round(v.held / 1e9, 2) for k, v in o.stats.tiers.items() if v.layers}
    print(f"tier {tier}: setup {time.perf_counter() - t0:.1f} s, held GB {held}", flush=True)
    report(f"splitzip offload tier {tier}, window {window} of 32 layers, prefetch {prefetch}", m, tier != "cache", want)
    print(f"  faults {o.stats.uploads}, {o.stats.bytes / 1e9:.1f} GB, host waited {o.stats.waited_s:.2f} s", flush=True)
    o.close()
    del m, o
    torch.cuda.empty_cache()
if rounds:
    # The eager forwards are bound by the host, whose speed drifts from
    # run to run: time the resident model and each gpu-tier window in
    # turns, all held at once.
    models = {"resident": res}
    for wp in os.environ.get("WINDOWS", "4:2").split(","):
        window, prefetch = map(int, wp.split(":"))
        models[f"gpu {window}:{prefetch}"] = offload(cache, src, window=window, prefetch=prefetch, tier="gpu")
    for x, label in ((ids, "128 tokens"), (step, "1 token")):
        print(f"interleaved, {label}, {rounds} rounds of 5 forwards:\n"
              f"{ratio_line(interleaved(models, x, rounds, use_cache=False), 'resident')}", flush=True)
    for name, m in models.items():
        if name != "resident":
            m.splitzip_offload.close()
    del models, res, m
    torch.cuda.empty_cache()
if os.environ.get("ACCEL") == "0":
    sys.exit(0)
from accelerate import cpu_offload  # noqa: E402
t0 = time.perf_counter()
cpu = AutoModelForCausalLM.from_pretrained(src, dtype=torch.bfloat16).eval()
cpu_offload(cpu, execution_device=torch.device("cuda:0"))
print(f"accelerate: load {time.perf_counter() - t0:.1f} s", flush=True)
report("accelerate cpu_offload", cpu, False, want, n=2)
