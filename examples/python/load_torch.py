#!/usr/bin/env python3
"""A PyTorch loader: load a splitzip cache onto a GPU, and with the source
checkpoint given, check every tensor against safetensors bit for bit.

    PYTHONPATH=python python3 examples/python/load_torch.py CACHE [SOURCE_DIR] [--device cuda:0]

Needs libsplitzip.so next to python/splitzip (make capi), torch, and
safetensors for the check.
"""

import argparse
import os
import time

import torch

import splitzip
from splitzip.torch import load_file, upload_into


def raw(t: torch.Tensor) -> torch.Tensor:
    """The tensor's bytes, to compare bit for bit (NaN payloads included)."""
    return t.reshape(-1).view(torch.uint8)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("cache")
    ap.add_argument("source", nargs="?")
    ap.add_argument("--device", default="cuda:0")
    a = ap.parse_args()

    t0 = time.perf_counter()
    tensors = load_file(a.cache, device=a.device)
    if torch.device(a.device).type == "cuda":
        torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    nbytes = sum(t.numel() * t.element_size() for t in tensors.values())
    # The first load in a process includes CUDA start-up and pinning the
    # staging buffers; later loads reuse them (see scripts/gpu-torch.py).
    print(f"loaded {len(tensors)} tensors, {nbytes / 2**30:.2f} GiB in {dt:.3f} s (first load in this process)")

    # A loader that owns its memory: refill two tensors in place.
    names = list(tensors)[:2]
    with splitzip.Cache(a.cache) as c:
        mine = {n: torch.empty_like(tensors[n]) for n in names}
        upload_into(c, mine)
        for n in names:
            assert torch.equal(raw(mine[n]), raw(tensors[n])), n
    print(f"upload_into refilled {len(names)} caller-owned tensors")

    if a.source:
        try:
            from safetensors.torch import load_file as st_load
        except ImportError:
            raise SystemExit("checking against SOURCE_DIR needs the safetensors package (pip install safetensors)")
        want = {}
        for f in sorted(os.listdir(a.source)):
            if f.endswith(".safetensors"):
                want.update(st_load(os.path.join(a.source, f), device=a.device))
        assert set(want) == set(tensors), "tensor names differ"
        for n, t in want.items():
            x = tensors[n]
            assert x.dtype == t.dtype and x.shape == t.shape, n
            assert torch.equal(raw(x), raw(t)), n
        print(f"all {len(want)} tensors equal safetensors.torch.load_file bit for bit")


if __name__ == "__main__":
    main()
