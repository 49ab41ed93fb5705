"""Where an eager offloaded forward's time goes (issue 13, the GPU
machine): the 0.9 B Llama of offloadbench.small_llama, tier pinned,
fixed-rate and raw packs; CUDA events (timing on) around each fault's
copy and scatter on the upload stream and each layer's compute on the
compute stream, and the host's clock at each layer's pre-hook, all
relative to the forward's start. Prints, per layer, when (ms) its copy
started and ended, its scatter ended, its compute started and ended,
and when the host reached its hook; then the copies' total busy time and
rate. Usage: python3 scripts/gpu-offload-timeline.py BIN WORKDIR
[window prefetch]..."""

import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
from splitzip.offload import offload  # noqa: E402
from offloadbench import small_llama  # noqa: E402

BIN, WORK = sys.argv[1], sys.argv[2]
configs = [(int(a), int(b)) for a, b in zip(sys.argv[3::2], sys.argv[4::2])] or [(4, 2)]
src, caches, _ = small_llama(BIN, WORK, ("fixed", "raw"))
ids = torch.randint(0, 32000, (1, 128), device="cuda:0")


def ev():
    e = torch.cuda.Event(enable_timing=True)
    return e


def instrument(m):
    """Hooks and a wrapped fault that record the timeline of the next
    forward into a dict of lists the caller reads after a synchronize."""
    o = m.splitzip_offload
    tl = {"copy0": {}, "copy1": {}, "scat1": {}, "comp0": {}, "comp1": {}, "host": {}}
    start = {}

    def begin(*_):
        e = ev()
        e.record(torch.cuda.current_stream())
        start["ev"], start["host"] = e, time.perf_counter()

    orig_fault = o._fault

    def fault(i):
        # The same enqueues as Offload._fault, with events between them.
        s = o.plan.slot(i)
        buf, info = o.packs[i]
        with torch.cuda.stream(o.stream):
            o.stream.wait_stream(o._compute)
            a, b, c = ev(), ev(), ev()
            a.record(o.stream)
            base = buf.data_ptr()
            if o.where[i] == "pinned":
                stage = o.staging[s]
                stage[:buf.numel()].copy_(buf, non_blocking=True)
                base = stage.data_ptr()
            b.record(o.stream)
            o.cache.scatter(o.dev, base, info, o.stream.cuda_stream)
            c.record(o.stream)
            done = torch.cuda.Event()
            done.record(o.stream)
        o.ready[i] = done
        o.faulted.append(i)
        tl["copy0"][i], tl["copy1"][i], tl["scat1"][i] = a, b, c

    hooks = [m.register_forward_pre_hook(begin)]
    for i, layer in enumerate(o.layers):
        def pre(mod, args, i=i):
            tl["host"][i] = time.perf_counter()
            e = ev()
            e.record(torch.cuda.current_stream())
            tl["comp0"][i] = e

        def post(mod, args, out, i=i):
            e = ev()
            e.record(torch.cuda.current_stream())
            tl["comp1"][i] = e
        hooks.append(layer.register_forward_pre_hook(pre))
        hooks.append(layer.register_forward_hook(post))
    o._fault = fault

    def undo():
        o._fault = orig_fault
        for h in hooks:
            h.remove()
    return tl, start, undo


def report(name, m, runs=5):
    with torch.no_grad():
        for _ in range(2):
            m(ids)
        torch.cuda.synchronize()
        totals = []
        for r in range(runs):
            tl, start, undo = instrument(m)
            t0 = time.perf_counter()
            m(ids)
            host_end = time.perf_counter()
            torch.cuda.synchronize()
            totals.append((time.perf_counter() - t0) * 1e3)
            undo()
        e0, h0 = start["ev"], start["host"]
        at = lambda e: e0.elapsed_time(e)  # noqa: E731
        print(f"\n{name}: wall {statistics.median(totals):.2f} ms (median of {runs}; timeline of the last, "
              f"host left the forward at {(host_end - h0) * 1e3:.2f} ms)")
        print(" layer  host-hook  copy-start copy-end  scatter-end  compute-start compute-end")
        busy = 0.0
        for i in range(len(m.splitzip_offload.layers)):
            row = f" {i:5d}  {(tl['host'][i] - h0) * 1e3:9.2f}"
            if i in tl["copy0"]:
                c0, c1, s1 = at(tl["copy0"][i]), at(tl["copy1"][i]), at(tl["scat1"][i])
                busy += c1 - c0
                row += f"  {c0:10.2f} {c1:8.2f}  {s1:11.2f}"
            else:
                row += " " * 34
            row += f"  {at(tl['comp0'][i]):13.2f} {at(tl['comp1'][i]):11.2f}"
            print(row)
        o = m.splitzip_offload
        nb = sum(o.packs[i][1].staged for i in tl["copy0"])
        print(f" copies: {len(tl['copy0'])} packs, {nb / 1e9:.3f} GB, busy {busy:.2f} ms, "
              f"{nb / busy / 1e6:.1f} GB/s while busy")


for codec in ("fixed", "raw"):
    for window, prefetch in configs:
        m = offload(caches[codec], src, window=window, prefetch=prefetch, tier="pinned")
        report(f"{codec} packs, tier pinned, window {window}, prefetch {prefetch}", m)
        m.splitzip_offload.close()
        del m
        torch.cuda.empty_cache()

# The link alone: every fixed pack copied back to back into one buffer.
m = offload(caches["fixed"], src, window=4, prefetch=2, tier="pinned")
o = m.splitzip_offload
dst = o.staging[0]
torch.cuda.synchronize()
for rep in range(3):
    a, b = ev(), ev()
    a.record()
    for buf, _ in o.packs:
        dst[:buf.numel()].copy_(buf, non_blocking=True)
    b.record()
    torch.cuda.synchronize()
    nb = sum(buf.numel() for buf, _ in o.packs)
    print(f"packs copied back to back: {nb / 1e9:.3f} GB in {a.elapsed_time(b):.2f} ms, "
          f"{nb / a.elapsed_time(b) / 1e6:.1f} GB/s")
o.close()
