"""Probe: does the kind of pinned memory change host-to-device copies?

Copies 64 MiB in copies of 256 KiB to 16 MiB from three kinds of pinned
host memory: cuMemHostAlloc, anonymous memory populated and registered
with cuMemHostRegister (what the cuda engine's Pinned gave before
2026-12-06), and the same on transparent huge pages (MADV_HUGEPAGE, what
it gives since for buffers of 2 MiB and more). Prints, per kind and copy
size, the rate on one stream (CUDA events, median of 13), the host time
of one cuMemcpyHtoDAsync call, and the rate with the copies alternating
between two streams (wall time). Ends with the host's THP setting.

    python3 scripts/h2d-pinned-probe.py
"""
import ctypes, statistics, time, sys
import torch
from h2d_probe_lib import bind
cuda, libc = bind()
N = 64 << 20
def chk(r, w):
    if r: raise RuntimeError(f"{w}: {r}")
def hostalloc():
    p = ctypes.c_void_p(); chk(cuda.cuMemHostAlloc(ctypes.byref(p), N, 0), "hostalloc"); libc.memset(p.value, 7, N); return p.value
def register(huge):
    p = libc.mmap(None, N + (2 << 20), 3, 0x22 | (0 if huge else 0x8000), -1, 0)
    if huge:
        p = (p + (2 << 20) - 1) & ~((2 << 20) - 1)
        libc.madvise(p, N, 14)  # MADV_HUGEPAGE
    libc.memset(p, 7, N)
    chk(cuda.cuMemHostRegister_v2(p, N, 1), "register"); return p
dev = torch.empty(N, dtype=torch.uint8, device="cuda")
s = torch.cuda.Stream()
def run(p, size, count=16, reps=15):
    ts, calls = [], []
    for r in range(reps):
        a = torch.cuda.Event(enable_timing=True); b = torch.cuda.Event(enable_timing=True)
        a.record(s)
        for i in range(count):
            off = (i * size) % N
            t0 = time.perf_counter()
            chk(cuda.cuMemcpyHtoDAsync_v2(dev.data_ptr() + off, p + off, size, ctypes.c_void_p(s.cuda_stream)), "copy")
            calls.append(time.perf_counter() - t0)
        b.record(s); b.synchronize()
        ts.append(a.elapsed_time(b) / 1e3)
    t = statistics.median(ts[2:])
    return size * count / t / 1e9, statistics.median(calls) * 1e6
s2 = torch.cuda.Stream()
def run2(p, size, count=16, reps=15):
    ts = []
    for r in range(reps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for i in range(count):
            off = (i * size) % N
            st = s if i % 2 == 0 else s2
            chk(cuda.cuMemcpyHtoDAsync_v2(dev.data_ptr() + off, p + off, size, ctypes.c_void_p(st.cuda_stream)), "copy")
        torch.cuda.synchronize()
        ts.append(time.perf_counter() - t0)
    return size * count / statistics.median(ts[2:]) / 1e9
for name, p in [("hostalloc", hostalloc()), ("register", register(False)), ("register-thp", register(True))]:
    for size in [256 << 10, 1 << 20, 4 << 20, 16 << 20]:
        count = min(16, N // size)
        g, c = run(p, size, count)
        print(f"{name:13s} {size>>10:6d} KiB x{count}: {g:6.1f} GB/s, call {c:5.1f} us; two streams (wall) {run2(p, size, count):6.1f} GB/s")
print(open("/sys/kernel/mm/transparent_hugepage/enabled").read().strip())
