#!/usr/bin/env python3
"""The host cost of one offload fault's calls (the GPU machine): how long
Cache.scatter takes on the calling thread, with a pack of one small
tensor in GPU memory (a real launch) and with an empty pack (everything
but the launch), beside torch's own enqueues (an event record, a stream
wait, a one-element add). Median of rounds of N calls, microseconds a
call. Usage: python3 scripts/scatter-call-bench.py BIN WORKDIR"""

import os
import statistics
import subprocess
import sys
import time

import torch
from safetensors.torch import save_file

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
from splitzip._lib import Cache, PackInfo  # noqa: E402

BIN, WORK = sys.argv[1], sys.argv[2]
N, ROUNDS = 2000, 7
os.makedirs(os.path.join(WORK, "src"), exist_ok=True)
src, cache = os.path.join(WORK, "src", "one.safetensors"), os.path.join(WORK, "one.sz")
torch.manual_seed(1)
save_file({"w": (torch.randn(256, 256) * 0.02).to(torch.bfloat16)}, src)
subprocess.run([BIN, "compress", src, "-o", cache, "--no-sync", "-q"], check=True, stdout=subprocess.DEVNULL)


def per_call(fn):
    ts = []
    for _ in range(ROUNDS):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(N):
            fn()
        ts.append((time.perf_counter() - t0) / N * 1e6)
        torch.cuda.synchronize()
    return statistics.median(ts)


c = Cache(cache)
dev = torch.device("cuda:0")
dst = torch.empty(256 * 256, dtype=torch.bfloat16, device=dev)
idx = [c.find("w")]
buf = torch.empty(c.pack_size(idx), dtype=torch.uint8, pin_memory=True)
info = c.pack_into_ptr(idx, [dst.data_ptr()], [dst.numel() * 2], buf.data_ptr(), buf.numel())
held = buf[:info.staged].to(dev)
c.gpu_prepare(0)
stream = torch.cuda.Stream(dev)
h = stream.cuda_stream
empty = PackInfo(0, 0, 0)
ev = torch.cuda.Event()
one = torch.zeros(1, device=dev)
rows = {
    "scatter, one 128 KiB tensor": lambda: c.scatter(0, held.data_ptr(), info, h),
    "scatter, empty pack (no launch)": lambda: c.scatter(0, held.data_ptr(), empty, h),
    "torch Event.record": lambda: ev.record(stream),
    "torch Stream.wait_event": lambda: stream.wait_event(ev),
    "torch add_ on one element": lambda: one.add_(1),
}
for name, fn in rows.items():
    print(f"{name}: {per_call(fn):.2f} us a call", flush=True)
c.scatter_check(0, h)
c.close()
