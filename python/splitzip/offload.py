"""Run a transformers decoder model whose layers do not all fit in GPU
memory: the layers' weights stay in the cache and are uploaded into a
window of slots in GPU memory just before each layer runs.

    from splitzip.offload import offload
    model = offload("llama.sz", "path/to/model", window=4, prefetch=2)
    logits = model(input_ids).logits

Everything but the decoder layers (embeddings, final norm, head, buffers)
is loaded resident, as splitzip.transformers.from_pretrained loads it. The
decoder layers (the longest nn.ModuleList of modules of one class) share
`window` slots, each a set of GPU tensors shaped like one layer's
parameters: layer i runs in slot i mod window. A forward pre-hook makes
the compute stream wait (on the device, not the host) for layer i's upload
and starts the uploads of the next `prefetch` layers (the plan of
splitzip.offload_plan, tested without a GPU) on an upload stream
of the runtime's, from a thread of its own: payloads are read from the
cache (page cache or disk), copied compressed and decoded in place in the
slot. An upload into a slot waits, on the upload stream, for the layer
that last used the slot to finish. Statistics: Offload.stats.
"""

import concurrent.futures
import threading
import time
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Union

try:
    import torch
except ImportError as e:  # pragma: no cover - depends on the environment
    raise ImportError("splitzip.offload needs PyTorch") from e

from ._lib import Cache
from .offload_plan import Plan
from .torch import DTYPES
from .transformers import _owner, from_pretrained


@dataclass
class Stats:
    """What an Offload did: layer uploads, the bytes they moved into the
    window (raw bytes), layers found in their slot already (hits), and the
    host time the forward spent waiting for uploads to be enqueued."""
    uploads: int = 0
    bytes: int = 0
    hits: int = 0
    waited_s: float = 0.0
    layers: Dict[int, int] = field(default_factory=dict)  # uploads per layer


def _decoder_layers(model: "torch.nn.Module"):
    """The name and ModuleList of the model's decoder layers: the longest
    ModuleList whose modules are all of one class."""
    best = None
    for name, m in model.named_modules():
        if isinstance(m, torch.nn.ModuleList) and len(m) >= 2 and len({type(x) for x in m}) == 1:
            if best is None or len(m) > len(best[1]):
                best = (name, m)
    if best is None:
        raise ValueError("no decoder layers found (a ModuleList of modules of one class)")
    return best


class Offload:
    """The runtime behind offload(): slots, streams, hooks. close() frees
    the slots and the cache."""

    def __init__(self, model, cache: Cache, device: "torch.device", window: int, prefetch: int):
        self.model, self.cache, self.device = model, cache, device
        self.window, self.prefetch = window, prefetch
        self.prefix, self.layers = _decoder_layers(model)
        self.plan = Plan(len(self.layers), window, prefetch)  # checks window and prefetch
        self.stats = Stats()
        # Per layer: (module, leaf) of each parameter and its cache index.
        self.params: List[List[tuple]] = []
        for i, layer in enumerate(self.layers):
            ps = []
            for rel, p in layer.named_parameters():
                name = f"{self.prefix}.{i}.{rel}"
                info = cache.info(name)
                if tuple(info.shape) != tuple(p.shape):
                    raise ValueError(f"{name}: shape {tuple(info.shape)} in the cache, {tuple(p.shape)} in the model")
                mod, leaf = _owner(layer, rel)
                ps.append((rel, mod, leaf, info.index, info.nbytes, DTYPES[info.dtype], tuple(info.shape)))
            self.params.append(ps)
        shapes = [[(r, s, d) for r, _, _, _, _, d, s in ps] for ps in self.params]
        if any(s != shapes[0] for s in shapes):
            raise ValueError("decoder layers differ in their parameters")
        self.slots = [{r: torch.nn.Parameter(torch.empty(s, dtype=d, device=device), requires_grad=False)
                       for r, s, d in shapes[0]} for _ in range(window)]
        self.used: List[Optional[torch.cuda.Event]] = [None] * window  # after the slot's last compute
        self.ready: Dict[int, torch.cuda.Event] = {}
        self.pending: Dict[int, concurrent.futures.Future] = {}
        self.events = []                   # library events to check at the forward's end
        self.stream = torch.cuda.Stream(device)
        self.pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="splitzip-offload")
        self.lock = threading.Lock()
        self.hooks = []
        for i, layer in enumerate(self.layers):
            self.hooks.append(layer.register_forward_pre_hook(self._pre(i)))
            self.hooks.append(layer.register_forward_hook(self._post(i)))
        self.hooks.append(model.register_forward_hook(lambda *a: self._finish()))

    def _upload(self, i: int) -> None:
        """Upload layer i into its slot on the upload stream (worker thread)."""
        s = self.plan.slot(i)
        with torch.cuda.stream(self.stream):
            if self.used[s] is not None:
                self.stream.wait_event(self.used[s])
            ps, slot = self.params[i], self.slots[s]
            ev = self.cache.upload_batch([p[3] for p in ps], [slot[p[0]].data_ptr() for p in ps],
                                         [p[4] for p in ps], device=self.device.index or 0,
                                         stream=self.stream.cuda_stream)
            done = torch.cuda.Event()
            done.record(self.stream)
        with self.lock:
            self.ready[i] = done
            self.events.append(ev)
            self.stats.uploads += 1
            self.stats.bytes += sum(p[4] for p in ps)
            self.stats.layers[i] = self.stats.layers.get(i, 0) + 1

    def _start(self, starts: List[int]) -> None:
        """Start the uploads the plan asks for, in order."""
        for j in starts:
            self.ready.pop(j, None)
            self.pending[j] = self.pool.submit(self._upload, j)

    def _pre(self, i: int):
        def hook(module, args):
            hits = self.plan.hits
            _, starts = self.plan.before(i)
            self.stats.hits += self.plan.hits - hits
            self._start(starts)
            f = self.pending.pop(i, None)  # an upload of i outstanding
            if f is not None:
                t0 = time.perf_counter()
                f.result()  # raises the upload's error, naming the tensor
                self.stats.waited_s += time.perf_counter() - t0
            torch.cuda.current_stream(self.device).wait_event(self.ready[i])
            s = self.plan.slot(i)
            for rel, mod, leaf, *_ in self.params[i]:
                mod._parameters[leaf] = self.slots[s][rel]
        return hook

    def _post(self, i: int):
        def hook(module, args, output):
            ev = torch.cuda.Event()
            ev.record(torch.cuda.current_stream(self.device))
            self.used[self.plan.slot(i)] = ev
        return hook

    def _finish(self) -> None:
        """At the forward's end: prefetch the first layers for the next
        forward, and check the finished uploads (decode errors)."""
        self._start(self.plan.end())
        with self.lock:
            evs, self.events = self.events, []
        for ev in evs:
            ev.wait()
            ev.release()

    def close(self) -> None:
        for h in self.hooks:
            h.remove()
        for f in list(self.pending.values()):
            try:
                f.result()
            except Exception:  # noqa: BLE001 - closing anyway
                pass
        self.pool.shutdown()
        for ev in self.events:
            ev.release()
        self.events = []
        self.slots = []
        self.cache.close()


def offload(cache: str, config, device: Union[str, int, "torch.device"] = "cuda:0", window: int = 2,
            prefetch: int = 1, source: Optional[str] = None, model_class=None, resident: bool = False):
    """The model of config (a directory with config.json, or a config)
    with its decoder layers offloaded: window layers' weights in GPU
    memory at a time, the next prefetch layers uploaded ahead. With
    resident, the layers' payloads stay in pinned host memory after
    their first upload (Cache(resident=True)): later forwards read no
    file. Returns the model (eval mode); model.splitzip_offload is the
    Offload (stats, close())."""
    device = torch.device(f"cuda:{device}" if isinstance(device, int) else device)
    if device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    model = from_pretrained(cache, config, device=device, source=source, model_class=model_class,
                            skip=lambda m: _decoder_layers(m)[0] + ".")
    c = Cache(cache, source, resident=resident)
    try:
        o = Offload(model, c, device, window, prefetch)
    except Exception:
        c.close()
        raise
    model.splitzip_offload = o
    return model
