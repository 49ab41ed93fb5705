"""Where an eager offloaded forward spends its time (the GPU machine): the
0.9 B Llama of offloadbench.small_llama from its fixed cache, resident
and offloaded (tiers gpu and pinned, window 4, prefetch 2). For each:
the median of 20 eager 128-token forwards, the host time a forward
spends in the offload's hooks (Stats.hooks_s) and, of it, in the fault
enqueues and the scatter launches; then a torch.profiler trace of three
forwards, its operators with the most host time and with the most device
time. With TRACE=DIR in the environment, each profile is also written
to DIR as a Chrome trace (trace-LABEL.json.gz) for
scripts/trace-gaps.py. A last variant keeps every layer in a slot of
its own (window as long as the model): the hooks' cost without faults.
Usage: python3 scripts/offload-profile.py BIN WORKDIR"""

import os
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
from splitzip.offload import offload  # noqa: E402
from splitzip.transformers import from_pretrained  # noqa: E402
from offloadbench import small_llama, timed, trace  # noqa: E402

BIN, WORK = sys.argv[1], sys.argv[2]
src, caches, _ = small_llama(BIN, WORK, ("fixed",))
ids = torch.randint(0, 32000, (1, 128), device="cuda:0")
N = 20


def wrap(obj, name, acc):
    """Replace obj.name by a wrapper that adds its host seconds to acc[name]."""
    f = getattr(obj, name)

    def timed_call(*a, **kw):
        t0 = time.perf_counter()
        try:
            return f(*a, **kw)
        finally:
            acc[name] = acc.get(name, 0.0) + time.perf_counter() - t0
    setattr(obj, name, timed_call)


def report(label, m, o=None):
    acc = {}
    if o is not None:
        wrap(o, "_fault", acc)
        wrap(o, "_check_packs", acc)
        wrap(o.cache, "scatter", acc)
        h0 = o.stats.hooks_s
    ms, _ = timed(m, ids, N)
    line = f"{label}: 128 tokens {ms:.2f} ms (median of {N})"
    if o is not None:
        per = (o.stats.hooks_s - h0) / (N + 1) * 1e3
        parts = ", ".join(f"{k} {v / (N + 1) * 1e3:.2f}" for k, v in sorted(acc.items()))
        line += f"; host in hooks {per:.2f} ms a forward (of it: {parts})"
    print(line, flush=True)
    prof = trace(m, ids, label)
    ka = prof.key_averages()
    print(ka.table(sort_by="self_cpu_time_total", row_limit=12, max_name_column_width=50), flush=True)
    print(ka.table(sort_by="self_cuda_time_total", row_limit=8, max_name_column_width=50), flush=True)


resident = from_pretrained(caches["fixed"], src)
report("resident", resident)
del resident
torch.cuda.empty_cache()
for tier, window in (("gpu", 4), ("pinned", 4), ("gpu", 16)):
    m = offload(caches["fixed"], src, window=window, prefetch=2, tier=tier)
    report(f"offload fixed, tier {tier}, window {window}, prefetch 2", m, m.splitzip_offload)
    m.splitzip_offload.close()
    del m
    torch.cuda.empty_cache()
