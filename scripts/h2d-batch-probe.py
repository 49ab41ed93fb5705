"""How the H200's host-to-device copies behave when queued back to back.

Issue 11's resident MoE loads copy one 1.6 MB payload per tensor; raw
copies one 2.26 MB tensor. bench h2d times isolated copies (1 MiB at 41
GB/s, 8 MiB at 53). This probe asks whether copies queued behind each
other, on one stream or several, still pay a per-copy cost, and what a
small kernel after each copy on the same stream (the in-place decode)
adds. Every stream first sleeps on the GPU so the whole queue is built
before the first copy starts; events time the copies alone.

    python3 scripts/h2d-batch-probe.py [TOTAL_MIB] [batch|overlap]

With "batch", it also times the same copies enqueued with one
cuMemcpyBatchAsync call per 64 of them (CUDA 12.8 and later), on one
stream, to see whether a batch costs less per copy than single copies.
With "overlap", it asks whether kernels on another stream run while
copies do, single and batched: the time of the copies alone, of the
kernels alone, and of both at once (their sum when they take turns,
their maximum when they overlap).
"""
import ctypes
import statistics
import sys

import torch

total = int(sys.argv[1]) if len(sys.argv) > 1 else 1024
total <<= 20
host = torch.empty(total, dtype=torch.uint8, pin_memory=True)
host.random_(0, 256)
dev = torch.empty(total, dtype=torch.uint8, device="cuda")
small = torch.empty(1 << 20, dtype=torch.float32, device="cuda")


def run(size, nstreams, kernel):
    streams = [torch.cuda.Stream() for _ in range(nstreams)]
    start = torch.cuda.Event(enable_timing=True)
    ends = [torch.cuda.Event(enable_timing=True) for _ in streams]
    n = total // size
    cur = torch.cuda.current_stream()
    cur.synchronize()
    torch.cuda._sleep(200_000_000)  # ~0.1 s: the queue is built meanwhile
    start.record(cur)
    for s in streams:
        s.wait_stream(cur)
    for i in range(n):
        s = streams[i % nstreams]
        with torch.cuda.stream(s):
            dev[i * size:(i + 1) * size].copy_(host[i * size:(i + 1) * size], non_blocking=True)
            if kernel:
                small[: 1024].add_(1.0)
    for s, e in zip(streams, ends):
        e.record(s)
    torch.cuda.synchronize()
    ms = max(start.elapsed_time(e) for e in ends)
    return n * size / ms / 1e6


class MemLocation(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]


class MemcpyAttributes(ctypes.Structure):
    _fields_ = [("srcAccessOrder", ctypes.c_int), ("srcLocHint", MemLocation),
                ("dstLocHint", MemLocation), ("flags", ctypes.c_uint)]


def overlap(size, batched, kernels=60):
    """Milliseconds of 1 GiB of copies alone, of kernels alone, and of
    both at once, each from one start event to the last end event."""
    cuda = ctypes.CDLL("libcuda.so.1")
    fn = getattr(cuda, "cuMemcpyBatchAsync_v2")
    cs, ks = torch.cuda.Stream(), torch.cuda.Stream()
    n = total // size
    attrs = (MemcpyAttributes * 1)(MemcpyAttributes(1, MemLocation(0, 0), MemLocation(0, 0), 0))
    idxs = (ctypes.c_size_t * 1)(0)
    calls = []
    for a in range(0, n, 64):
        k = min(64, n - a)
        calls.append(((ctypes.c_uint64 * k)(*[dev.data_ptr() + (a + i) * size for i in range(k)]),
                      (ctypes.c_uint64 * k)(*[host.data_ptr() + (a + i) * size for i in range(k)]),
                      (ctypes.c_size_t * k)(*([size] * k)), k))
    work = torch.empty(64 << 20, dtype=torch.float32, device="cuda")

    def once(copies, kern):
        cur = torch.cuda.current_stream()
        cur.synchronize()
        start = torch.cuda.Event(enable_timing=True)
        ends = []
        torch.cuda._sleep(200_000_000)
        start.record(cur)
        for st, on in ((cs, copies), (ks, kern)):
            if not on:
                continue
            st.wait_stream(cur)
            with torch.cuda.stream(st):
                if st is ks:
                    for _ in range(kernels):
                        work.mul_(1.0001)
                elif batched:
                    for d, s_, z, k in calls:
                        fn(d, s_, z, ctypes.c_size_t(k), attrs, idxs, ctypes.c_size_t(1), ctypes.c_void_p(cs.cuda_stream))
                else:
                    for i in range(n):
                        dev[i * size:(i + 1) * size].copy_(host[i * size:(i + 1) * size], non_blocking=True)
            e = torch.cuda.Event(enable_timing=True)
            e.record(st)
            ends.append(e)
        torch.cuda.synchronize()
        return max(start.elapsed_time(e) for e in ends)

    res = []
    for copies, kern in ((True, False), (False, True), (True, True)):
        res.append(statistics.median([once(copies, kern) for _ in range(6)][1:]))
    return res


def run_batched(size, per_call, flags=0, busy=None):
    cuda = ctypes.CDLL("libcuda.so.1")
    fn = getattr(cuda, "cuMemcpyBatchAsync_v2", None)
    if fn is None:
        return None
    s = torch.cuda.Stream()
    n = total // size
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    attrs = (MemcpyAttributes * 1)(MemcpyAttributes(1, MemLocation(0, 0), MemLocation(0, 0), flags))
    idxs = (ctypes.c_size_t * 1)(0)
    calls = []
    for a in range(0, n, per_call):
        k = min(per_call, n - a)
        dsts = (ctypes.c_uint64 * k)(*[dev.data_ptr() + (a + i) * size for i in range(k)])
        srcs = (ctypes.c_uint64 * k)(*[host.data_ptr() + (a + i) * size for i in range(k)])
        sizes_ = (ctypes.c_size_t * k)(*([size] * k))
        calls.append((dsts, srcs, sizes_, k))
    cur = torch.cuda.current_stream()
    cur.synchronize()
    torch.cuda._sleep(200_000_000)
    start.record(cur)
    s.wait_stream(cur)
    if busy is not None:  # kernels running beside the copies
        stream, work = busy
        stream.wait_stream(cur)
        with torch.cuda.stream(stream):
            for _ in range(100):
                work.add_(1)
    for dsts, srcs, sizes_, k in calls:
        rc = fn(dsts, srcs, sizes_, ctypes.c_size_t(k), attrs, idxs, ctypes.c_size_t(1), ctypes.c_void_p(s.cuda_stream))
        if rc != 0:
            raise RuntimeError("cuMemcpyBatchAsync_v2: %d" % rc)
    end.record(s)
    torch.cuda.synchronize()
    return n * size / start.elapsed_time(end) / 1e6


sizes = [256 << 10, 1 << 20, 1_600_000, 2_260_000, 4 << 20, 8 << 20, 16 << 20, 64 << 20]
print("device", torch.cuda.get_device_name(), "total", total >> 20, "MiB")
print("%10s %8s %6s %s" % ("size", "streams", "kernel", "GB/s (median of 5; min-max)"))
for kernel in ((False,) if len(sys.argv) > 2 else (False, True)):
    for nstreams in ((1,) if len(sys.argv) > 2 else (1, 4)):
        for size in (sizes if len(sys.argv) < 3 or sys.argv[2] == "batch" else ()):
            rates = [run(size, nstreams, kernel) for _ in range(6)][1:]
            print("%10d %8d %6s %.1f (%.1f-%.1f)" % (size, nstreams, kernel, statistics.median(rates), min(rates), max(rates)), flush=True)

if len(sys.argv) > 2 and sys.argv[2] == "batch":
    ref = host[: 64 << 20].clone()
    dev.zero_()
    # flags 1: CU_MEMCPY_FLAG_PREFER_OVERLAP_WITH_COMPUTE (copy engines,
    # not kernels); each also with a busy kernel on another stream.
    busy = torch.cuda.Stream()
    big = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    for flags in (0, 1):
        for load in (False, True):
            for size in (256 << 10, 1_600_000, 8 << 20):
                rates = []
                for _ in range(6):
                    rates.append(run_batched(size, 64, flags, (busy, big) if load else None))
                if rates[0] is None:
                    print("no cuMemcpyBatchAsync_v2 in this driver")
                    break
                rates = rates[1:]
                print("%10d batch64 flags %d, kernels beside %5s: %.1f (%.1f-%.1f)" % (size, flags, load, statistics.median(rates), min(rates), max(rates)), flush=True)
    torch.cuda.synchronize()
    ok = torch.equal(dev[: 64 << 20].cpu(), ref)
    print("batched copies landed:", ok)

if len(sys.argv) > 2 and sys.argv[2] == "overlap":
    for size in (1_600_000, 256 << 10):
        for batched in (False, True):
            c, k, both = overlap(size, batched)
            print("%10d %s: copies alone %.2f ms, kernels alone %.2f ms, both %.2f ms (sum %.2f, max %.2f)" % (
                size, "batched" if batched else "single ", c, k, both, c + k, max(c, k)), flush=True)
