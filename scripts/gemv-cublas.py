#!/usr/bin/env python3
"""cuBLAS's BF16 matrix-vector products on the shapes `splitzip bench gemv`
times (issue 36's baseline): torch.nn.functional.linear(x, W), as a Linear
layer computes it, with CUDA events, a warm-up round and the median of
RUNS launches, W rotated among enough copies to exceed the L2 cache four
times; W is N(0, 0.02) with each row scaled by 0.25 to 1.75, x N(0, 1).
Each timed launch is queued behind a spin of the GPU (torch.cuda._sleep),
so that its events time the device's work and not the host's call:
without it, F.linear's host time (about as long as a small product's)
opened gaps between the events, and cuBLAS timed 28-36 us on 4096x4096
and 40 us on 1024x4096 where the spin gives 17.8 and 10.3 us (H100,
2026-12-06). `splitzip bench gemv` times its kernels without a spin (it
has no spin kernel): a driver launch queues faster than these products
run, and its fused times are below the spin-timed ones the compressed
residency measures for the same kernel (12.6 against 14.3 us on
1024x4096), so the comparison does not favour the fused kernel.

  python3 scripts/gemv-cublas.py [SHAPES] [BATCHES] [RUNS] [JSON_OUT]

SHAPES and BATCHES as bench gemv's flags (defaults the same); one line a
configuration on stdout, the results as JSON in JSON_OUT if given.
"""
import json
import statistics
import sys

import torch


# SPIN is the GPU cycles each timed launch waits behind (about 100 us):
# longer than the host takes to queue the launch and its two events.
SPIN = 200_000


def main():
    shapes = [tuple(int(v) for v in s.split("x")) for s in (sys.argv[1] if len(sys.argv) > 1 else "4096x4096,14336x4096,4096x14336,128256x4096").split(",")]
    batches = [int(b) for b in (sys.argv[2] if len(sys.argv) > 2 else "1,8,16").split(",")]
    runs = int(sys.argv[3]) if len(sys.argv) > 3 else 30
    out = sys.argv[4] if len(sys.argv) > 4 else None
    dev = torch.device("cuda:0")
    props = torch.cuda.get_device_properties(dev)
    l2 = getattr(props, "L2_cache_size", 50 << 20)
    gen = torch.Generator(device=dev).manual_seed(36)
    results = []
    print(f"{props.name}: torch {torch.__version__}, cuBLAS through F.linear, L2 {l2 >> 20} MiB")
    for rows, cols in shapes:
        raw = 2 * rows * cols
        sets = max(1, -(-4 * l2 // raw))
        ws = []
        for _ in range(sets):
            scale = 0.02 * (1 - 0.75 + 1.5 * torch.rand(rows, 1, device=dev, generator=gen))
            ws.append((torch.randn(rows, cols, device=dev, generator=gen) * scale).to(torch.bfloat16))
        for b in batches:
            x = torch.randn(b, cols, device=dev, generator=gen).to(torch.bfloat16)
            times = []
            starts = [torch.cuda.Event(enable_timing=True) for _ in ws]
            ends = [torch.cuda.Event(enable_timing=True) for _ in ws]
            rounds = 1 + -(-runs // sets)
            for r in range(rounds):
                for i, w in enumerate(ws):
                    torch.cuda._sleep(SPIN)
                    starts[i].record()
                    torch.nn.functional.linear(x, w)
                    ends[i].record()
                torch.cuda.synchronize()
                if r > 0:
                    times += [s.elapsed_time(e) for s, e in zip(starts, ends)]
            med = statistics.median(times)
            res = {"rows": rows, "cols": cols, "batch": b, "raw_bytes": raw, "median_us": med * 1e3,
                   "min_us": min(times) * 1e3, "gb_per_s": raw / (med * 1e-3) / 1e9, "runs": len(times), "sets": sets}
            results.append(res)
            print(f"{rows:6d} x {cols:<6d} batch {b:2d}  cuBLAS {res['median_us']:8.1f} us ({res['gb_per_s']:5.0f} GB/s of weights)  ({len(times)} runs, {sets} sets)")
        del ws
        torch.cuda.empty_cache()
    if out:
        with open(out, "w") as f:
            json.dump({"device": props.name, "torch": torch.__version__, "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
