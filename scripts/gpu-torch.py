#!/usr/bin/env python3
"""PyTorch check on the GPU machine (issue 5): loads a generated checkpoint
with safetensors.torch.load_file and with splitzip.torch.load_file to cuda:0,
compares every tensor bit for bit, uploads from several threads at once, and
times both loaders from page cache (median of REPEAT, alternating).

    python3 scripts/gpu-torch.py CHECKPOINT_DIR CACHE_DIR
Needs libsplitzip.so next to python/splitzip (make capi) and PyTorch.
"""

import os
import statistics
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))

import torch  # noqa: E402
from safetensors.torch import load_file as st_load  # noqa: E402

import splitzip  # noqa: E402
from splitzip.torch import load_file as sz_load, upload_into  # noqa: E402


def st_load_dir(src, device):
    out = {}
    for f in sorted(os.listdir(src)):
        if f.endswith(".safetensors"):
            out.update(st_load(os.path.join(src, f), device=device))
    return out


def main():
    src, cache = sys.argv[1], sys.argv[2]
    repeat = int(os.environ.get("REPEAT", "3"))
    a = st_load_dir(src, "cuda:0")
    b = sz_load(cache, device="cuda:0")
    assert set(a) == set(b), "tensor names differ"
    for name in a:
        x, y = a[name], b[name]
        assert x.dtype == y.dtype and x.shape == y.shape, name
        assert torch.equal(x.view(torch.uint8) if x.dtype != torch.bool else x, y.view(torch.uint8) if y.dtype != torch.bool else y), name
    print(f"bit for bit: {len(a)} tensors equal")

    # Several threads uploading into caller-owned tensors at once.
    with splitzip.Cache(cache) as c:
        names = list(a)
        dst = {n: torch.empty_like(a[n]) for n in names}
        errs = []

        def work(part):
            try:
                torch.cuda.set_device(0)
                upload_into(c, {n: dst[n] for n in part})
            except Exception as e:
                errs.append(repr(e))
        ts = [threading.Thread(target=work, args=(names[i::4],)) for i in range(4)]
        [t.start() for t in ts]
        [t.join() for t in ts]
        assert not errs, errs
        for n in names:
            assert torch.equal(dst[n].view(torch.uint8) if dst[n].dtype != torch.bool else dst[n], a[n].view(torch.uint8) if a[n].dtype != torch.bool else a[n]), n
        print("4 threads uploaded into caller-owned tensors: equal")
    del a, b, dst
    torch.cuda.empty_cache()

    total = sum(os.path.getsize(os.path.join(src, f)) for f in os.listdir(src) if f.endswith(".safetensors"))
    ts_st, ts_sz = [], []
    for _ in range(repeat):
        for fn, acc in ((lambda: st_load_dir(src, "cuda:0"), ts_st), (lambda: sz_load(cache, device="cuda:0"), ts_sz)):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            out = fn()
            torch.cuda.synchronize()
            acc.append(time.perf_counter() - t0)
            del out
            torch.cuda.empty_cache()
    st, sz = statistics.median(ts_st), statistics.median(ts_sz)
    print(f"safetensors.torch.load_file: {st:.3f} s ({total / st / 1e9:.1f} GB/s); "
          f"splitzip.torch.load_file: {sz:.3f} s ({total / sz / 1e9:.1f} GB/s); speedup {st / sz:.2f}x")


if __name__ == "__main__":
    main()
