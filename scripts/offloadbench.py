"""Helpers of the offload scripts (gpu-offload*.py, hf-bench.py,
moe-offload-bench.py; the GPU machine): the 0.9 B Llama and its caches,
and timings of eager forwards, CUDA graph replays and generations of a
model, median of n after a warm-up, torch.cuda.synchronize() around
each."""

import os
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
    """Greedy decoding of tokens after ids (batch 1) with each one-token
    step replayed from a CUDA graph over a static KV cache: the prompt's
    forward runs eagerly, the step is captured once (after two eager
    warm-up steps on a side stream) and replayed with the token and its
    position updated on the device, so no step waits for the host.
    Returns the tokens (prompt included) and the median seconds of the
    tokens - 1 replays of n decodes after one, or (None, error) when the
    model's step cannot be captured."""
    from transformers import StaticCache
    dev, length = ids.device, ids.shape[1]
    try:
        times, out_ids = [], None
        with torch.no_grad():
            for run in range(n + 1):
                cache = StaticCache(config=model.config, max_cache_len=length + tokens + 1)
                logits = model(ids, past_key_values=cache, cache_position=torch.arange(length, device=dev),
                               use_cache=True).logits
                gen = torch.empty((1, tokens), dtype=torch.long, device=dev)
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
                    tok.copy_(nxt.view(1, 1))
                    pos.add_(1)
                torch.cuda.synchronize()
                if run:
                    times.append(time.perf_counter() - t0)
                out_ids = torch.cat([ids, gen], dim=1)
                del g
        return out_ids, statistics.median(times)
    except Exception as e:  # noqa: BLE001 - reported
        return None, e
