"""Timing helpers of scripts/gpu-offload.py and scripts/gpu-offload-8b.py
(the GPU machine): eager forwards and CUDA graph replays of a model,
median of n after a warm-up, torch.cuda.synchronize() around each."""

import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
from splitzip.offload import capture  # noqa: E402


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
