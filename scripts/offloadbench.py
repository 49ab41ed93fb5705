"""Helpers of the offload scripts (gpu-offload*.py, hf-bench.py,
moe-offload-bench.py; the GPU machine): the 0.9 B Llama and its caches,
and timings of eager forwards, CUDA graph replays and generations of a
model, median of n after a warm-up, torch.cuda.synchronize() around
each."""

import gzip
import os
import re
import shutil
import statistics
import subprocess
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
from splitzip.offload import capture  # noqa: E402


def small_llama(bin_, work, codecs=("fixed", "entropy", "raw")):
    """A 0.888 B-parameter Llama (hidden 2048, 16 layers, intermediate
    5632, tied embeddings, random init, seed 3, BF16) saved under
    work/model, compressed with bin_ into work/<codec> for each codec
    (fixed, entropy, raw = every tensor raw), everything read once into
    the page cache. Returns (model dir, {codec: cache dir}, config)."""
    from transformers import AutoModelForCausalLM, LlamaConfig
    src = os.path.join(work, "model")
    cfg = LlamaConfig(vocab_size=32000, hidden_size=2048, intermediate_size=5632, num_hidden_layers=16,
                      num_attention_heads=16, num_key_value_heads=16, max_position_embeddings=2048,
                      tie_word_embeddings=True, torch_dtype="bfloat16")
    if not os.path.exists(os.path.join(src, "config.json")):
        torch.manual_seed(3)
        AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16).save_pretrained(src)
    extra = {"fixed": [], "entropy": ["--codec", "entropy"], "raw": ["--min-saving", "0.99"]}
    caches = {}
    for codec in codecs:
        c = os.path.join(work, codec)
        if not os.path.exists(c):
            subprocess.run([bin_, "compress", src, "-o", c, "--no-sync", "-q"] + extra[codec], check=True,
                           stdout=subprocess.DEVNULL)
        caches[codec] = c
    for root, _, files in os.walk(work):  # page cache
        for f in files:
            with open(os.path.join(root, f), "rb") as fh:
                while fh.read(1 << 24):
                    pass
    return src, caches, cfg


def llama8b(bin_, work):
    """The Llama-3-8B shape (hidden 4096, 32 layers, intermediate 14336, 8
    key-value heads, vocab 128256, untied head; random N(0, 0.02) BF16
    weights, norms 1, seed 8) written straight to safetensors shards
    under work/model (16 GB) and compressed fixed-rate with bin_ into
    work/fixed, each unless already there. Returns (model dir, cache
    dir, config)."""
    import json
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM, LlamaConfig
    src, cache = os.path.join(work, "model"), os.path.join(work, "fixed")
    cfg = LlamaConfig(vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                      num_attention_heads=32, num_key_value_heads=8, max_position_embeddings=8192,
                      rope_theta=500000.0, tie_word_embeddings=False, torch_dtype="bfloat16")
    t0 = time.perf_counter()
    if not os.path.exists(os.path.join(src, "model.safetensors.index.json")):
        os.makedirs(src, exist_ok=True)
        cfg.save_pretrained(src)
        with torch.device("meta"):
            shapes = {k: v.shape for k, v in AutoModelForCausalLM.from_config(cfg).state_dict().items()}
        g = torch.Generator().manual_seed(8)
        shard, nbytes, wmap = {}, 0, {}

        def flush():
            name = f"model-{len(set(wmap.values())):05d}.safetensors"
            save_file(shard, os.path.join(src, name), metadata={"format": "pt"})
            wmap.update({k: name for k in shard})
            shard.clear()

        for k, s in shapes.items():
            t = torch.empty(s, dtype=torch.float32)
            if k.endswith("norm.weight"):
                t.fill_(1.0)
            else:
                t.normal_(0, 0.02, generator=g)
            shard[k] = t.to(torch.bfloat16)
            nbytes += shard[k].numel() * 2
            if nbytes >= 5 << 30:
                flush()
                nbytes = 0
        if shard:
            flush()
        with open(os.path.join(src, "model.safetensors.index.json"), "w") as f:
            json.dump({"metadata": {"total_size": sum(s.numel() * 2 for s in shapes.values())}, "weight_map": wmap}, f)
    print(f"generated in {time.perf_counter() - t0:.1f} s", flush=True)
    if not os.path.exists(cache):
        t0 = time.perf_counter()
        subprocess.run([bin_, "compress", os.path.join(src, "model.safetensors.index.json"), "-o", cache, "--no-sync",
                        "-q"], check=True, stdout=subprocess.DEVNULL)
        print(f"compressed in {time.perf_counter() - t0:.1f} s", flush=True)
    return src, cache, cfg


def timed(m, x, n, **kw):
    """Median ms of n eager forwards of m on x after one, and its logits."""
    with torch.no_grad():
        out = m(x, **kw).logits
        torch.cuda.synchronize()
        ts = []
        for _ in range(n):
            t0 = time.perf_counter()
            m(x, **kw)
            torch.cuda.synchronize()
            ts.append(time.perf_counter() - t0)
    return statistics.median(ts) * 1e3, out


def trace(m, x, label, n=3, **kw):
    """Profile n eager forwards of m on x (torch.profiler, host and
    device); with TRACE=DIR in the environment, also write the Chrome
    trace to DIR/trace-LABEL.json.gz (scripts/trace-gaps.py reads it).
    Returns the profile."""
    from torch.profiler import ProfilerActivity, profile
    with torch.no_grad(), profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(n):
            m(x, **kw)
        torch.cuda.synchronize()
    out = os.environ.get("TRACE")
    if out:
        os.makedirs(out, exist_ok=True)
        path = os.path.join(out, "trace-" + re.sub(r"[^a-z0-9]+", "-", label.lower()).strip("-") + ".json")
        prof.export_chrome_trace(path)
        with open(path, "rb") as f, gzip.open(path + ".gz", "wb") as g:
            shutil.copyfileobj(f, g)
        os.remove(path)
    return prof


def interleaved(models, x, rounds=5, n=5, **kw):
    """Eager forward times of several models on x measured in turns:
    each round times n forwards of each model (timed: median after one),
    so that a host whose speed drifts during the run slows all of them
    alike. models: {name: model}. Returns {name: [median ms per round]}."""
    out = {name: [] for name in models}
    for _ in range(rounds):
        for name, m in models.items():
            out[name].append(timed(m, x, n, **kw)[0])
    return out


def ratio_line(times, base):
    """One line per model of interleaved()'s times: each round's ms and
    its ratio to base's in the same round."""
    lines = []
    for name, ts in times.items():
        rs = [t / b for t, b in zip(ts, times[base])]
        lines.append(f"{name}: ms {', '.join(f'{t:.1f}' for t in ts)}; / {base} "
                     f"{', '.join(f'{r:.2f}' for r in rs)} (max {max(rs):.2f})")
    return "\n".join(lines)


def steps(m, layers, x, n=5, **kw):
    """Where n eager forwards of m on x spend their time, without a
    profiler: a pre-hook on each of layers (an nn.ModuleList) takes the
    host time and records a CUDA event on the current stream. Returns a
    line: the medians of the host's time to reach the last layer, to
    return from the forward, and to see it finished on the device after a
    synchronization (all from the forward's start), of the device's span
    from the forward's first work to its last (CUDA events), and the
    device time between layers (median and max of each forward's median).
    layers needs at least two modules."""
    stamps, evs = [], []

    def pre(_mod, _args):
        stamps.append(time.perf_counter())
        e = torch.cuda.Event(enable_timing=True)
        e.record()
        evs.append(e)
    hooks = [layer.register_forward_pre_hook(pre) for layer in layers]
    host_last, host_end, dev_end, dev_span, gaps = [], [], [], [], []
    try:
        with torch.no_grad():
            for _ in range(n + 1):
                stamps.clear()
                evs.clear()
                torch.cuda.synchronize()
                start = torch.cuda.Event(enable_timing=True)
                end = torch.cuda.Event(enable_timing=True)
                t0 = time.perf_counter()
                start.record()
                m(x, **kw)
                t1 = time.perf_counter()
                end.record()
                torch.cuda.synchronize()
                t2 = time.perf_counter()
                host_last.append((stamps[-1] - t0) * 1e3)
                host_end.append((t1 - t0) * 1e3)
                dev_end.append((t2 - t0) * 1e3)
                dev_span.append(start.elapsed_time(end))
                gaps.append(statistics.median(a.elapsed_time(b) for a, b in zip(evs, evs[1:])))
    finally:
        for h in hooks:
            h.remove()
    med = lambda v: statistics.median(v[1:])  # noqa: E731 - the first forward warms up
    return (f"host reaches the last layer at {med(host_last):.1f} ms, returns at {med(host_end):.1f} ms, "
            f"sees the device done at {med(dev_end):.1f} ms; the device's span {med(dev_span):.1f} ms, "
            f"its time a layer {med(gaps):.3f} ms (max of forwards {max(gaps[1:]):.3f})")


def graph_timed(m, x, n):
    """Median ms of n replays of a CUDA graph of m's forward of x, and
    its logits (None and the error when it cannot be captured)."""
    try:
        g, _, out = capture(m, x, use_cache=False)
        g.replay()
        torch.cuda.synchronize()
        ts = []
        for _ in range(n):
            t0 = time.perf_counter()
            g.replay()
            torch.cuda.synchronize()
            ts.append(time.perf_counter() - t0)
        ms = statistics.median(ts) * 1e3
        del g
        return ms, out.clone()
    except Exception as e:  # noqa: BLE001 - reported
        return None, e


def save_random(cfg, path):
    """A model of cfg built on cuda:0 with seed 0, its matrices N(0, 0.02)
    (random init, BF16), saved at path; returns its parameters' bytes."""
    from transformers import AutoModelForCausalLM
    torch.manual_seed(0)
    with torch.device("cuda:0"):
        m = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
    with torch.no_grad():
        for p in m.parameters():
            if p.dim() >= 2:
                p.normal_(0, 0.02)
    m.save_pretrained(path)
    size = sum(p.numel() * p.element_size() for p in m.parameters())
    del m
    torch.cuda.empty_cache()
    return size


def timed_generate(model, ids, kw, warm=True, n=3):
    """The tokens and the median seconds of n generations (after one
    whole warm-up generation; one timed run with warm=False, for
    accelerate)."""
    ts = []
    with torch.no_grad():
        if warm:
            model.generate(ids, **kw)
        for _ in range(n if warm else 1):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            out = model.generate(ids, **kw)
            torch.cuda.synchronize()
            ts.append(time.perf_counter() - t0)
    return out, statistics.median(ts)


def graph_decode(model, ids, tokens, n=3):
    """Greedy decoding of tokens after ids (batch rows of one length)
    with each one-token step replayed from a CUDA graph over a static KV
    cache: the prompt's forward runs eagerly, the step is captured once
    (after two eager warm-up steps on a side stream) and replayed with
    the tokens and their position updated on the device, so no step
    waits for the host. Returns the tokens (prompt included) and the
    median seconds of the tokens - 1 replays of n decodes after one
    (None for n=0: one untimed decode), or (None, error) when the
    model's step cannot be captured."""
    from transformers import StaticCache
    dev, (batch, length) = ids.device, ids.shape
    try:
        times, out_ids = [], None
        with torch.no_grad():
            for run in range(n + 1):
                cache = StaticCache(config=model.config, max_cache_len=length + tokens + 1)
                logits = model(ids, past_key_values=cache, cache_position=torch.arange(length, device=dev),
                               use_cache=True).logits
                gen = torch.empty((batch, tokens), dtype=torch.long, device=dev)
                gen[:, 0] = logits[:, -1].argmax(-1)
                tok, pos = gen[:, :1].clone(), torch.tensor([length], device=dev)

                def step():
                    return model(tok, past_key_values=cache, cache_position=pos, use_cache=True).logits[:, -1].argmax(-1)
                side = torch.cuda.Stream(dev)
                side.wait_stream(torch.cuda.current_stream(dev))
                with torch.cuda.stream(side):
                    for _ in range(2):
                        step()
                torch.cuda.current_stream(dev).wait_stream(side)
                g = torch.cuda.CUDAGraph()
                with torch.cuda.graph(g):
                    nxt = step()
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                for k in range(1, tokens):
                    g.replay()
                    gen[:, k] = nxt
                    tok.copy_(nxt.view(batch, 1))
                    pos.add_(1)
                torch.cuda.synchronize()
                if run:
                    times.append(time.perf_counter() - t0)
                out_ids = torch.cat([ids, gen], dim=1)
                del g
        return out_ids, statistics.median(times) if times else None
    except Exception as e:  # noqa: BLE001 - reported
        return None, e
