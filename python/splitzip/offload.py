"""Run a transformers decoder model whose layers do not all fit in GPU
memory: the layers' weights stay compressed outside the GPU's working
set and are written into a window of slots in GPU memory just before
each layer runs.

    from splitzip.offload import offload
    model = offload("llama.sz", "path/to/model", window=4, prefetch=2, tier="pinned")
    logits = model(input_ids).logits

transformers builds the model on the CPU from the cache's tensors (its
own from_pretrained, so its renames and expert fusions apply); each
decoder-layer parameter is then traced back to the checkpoint tensors
that tile its bytes (splitzip._pieces), and everything but those
parameters (embeddings, final norm, head, buffers, parameters no tiling
reproduces) moves to the GPU, resident. The decoder layers (of the
nn.ModuleLists of modules of one class, the one holding the most
parameters) share `window` slots, each a set of GPU tensors shaped like a
layer's offloaded parameters: layer i runs in slot i mod window, and a
fault writes each checkpoint tensor into its byte range of the slot, so
a mixture-of-experts layer's fused experts fill from the checkpoint's
separate ones. A forward pre-hook makes
the compute stream wait (on the device, not the host) for layer i's
fault-in and starts those of the next `prefetch` layers (the plan of
splitzip.offload_plan, tested without a GPU) on an upload stream.

Where a layer's bytes live between its runs, its tier:
- "cache": in the cache (page cache or disk). A fault reads the payload
  files on a worker thread, copies them compressed and decodes them in
  place in the slot (Cache.upload_batch). Holds nothing; not capturable.
- "pinned": the layer's pack (its payloads and raw tensors behind a
  scatter table, built and checked once, Cache.pack_into_ptr) in pinned
  host memory. A fault copies the pack over PCIe into the slot's staging
  buffer and launches one kernel that decodes every tensor into the slot
  (two from an entropy cache, whose pinned packs keep the entropy
  payloads: fewer bytes over PCIe, decoded by a second kernel).
- "gpu": the pack in GPU memory (a compressed tier, about 75% of the
  layer's raw bytes for BF16). A fault is that one kernel, no PCIe.
  Layers past the `gpu_bytes` budget are pinned instead.
- "compressed" is no tier of a window: the whole model stays in GPU
  memory, each linear layer as its fixed payload, multiplied from it by
  splitzip.nn's fused kernel (splitzip.offload_compressed).

With experts= (tiers pinned and gpu), a mixture-of-experts layer's
fused expert tensors are faulted in an expert at a time: only the
experts its router picks, from a pool of hot experts' packs in GPU memory
or from pinned memory (splitzip.offload_experts; with
expert_routing="device", decided on the device and capturable,
splitzip.offload_routed). Its other parameters move as a layer.

Pinned and gpu faults only enqueue work on the upload stream, with fixed
arguments, so an offloaded forward can be captured in a CUDA graph and
replayed (torch.cuda.graph). The kernel checks every table entry on the
device; what it finds is raised at the forward's end (or by
Offload.check() after graph replays), naming the tensor.

A forward that ends in an exception (a corrupt payload, KeyboardInterrupt)
leaves the runtime consistent: the next forward waits for what was
enqueued, forgets what the slots held, and faults layers in anew.
Nothing is allocated per forward, so nothing leaks. Statistics:
Offload.stats, per tier.
"""

import concurrent.futures
import threading
import time
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Union

try:
    import torch
    import transformers  # noqa: F401 - splitzip.transformers builds the models
except ImportError as e:  # pragma: no cover - depends on the environment
    raise ImportError("splitzip.offload needs torch and transformers (pip install transformers)") from e

from ._lib import Cache, Error, error
from ._packs import ENTRY, owner
from ._pieces import Index
from .offload_experts import Experts, ExpertStats, check_budget, expert_modules, split_rows
from .offload_compressed import LINEARS, Compressed
from .offload_plan import TIERS, Plan, tiers
from .offload_routed import DeviceExperts
from .transformers import _owner, load

@dataclass
class TierStats:
    """One tier's share of an Offload: layers it holds, the bytes it
    holds them in (packs; 0 for the cache), faults served from it and
    the raw bytes those wrote into the window."""
    layers: int = 0
    held: int = 0
    faults: int = 0
    bytes: int = 0


@dataclass
class Stats:
    """What an Offload did: layer faults, the raw bytes they wrote into
    the window, layers found in their slot already (hits), the host time
    forwards spent waiting for faults to be enqueued, the host time in
    the offload's hooks (what forwards pay on the host for offloading,
    those waits included), faults per layer, the same per tier, and with
    experts= what the expert-granular offload did (layer faults then
    count the layers' other parameters only)."""
    uploads: int = 0
    bytes: int = 0
    hits: int = 0
    waited_s: float = 0.0
    hooks_s: float = 0.0
    layers: Dict[int, int] = field(default_factory=dict)
    tiers: Dict[str, TierStats] = field(default_factory=lambda: {t: TierStats() for t in TIERS})
    experts: Optional[ExpertStats] = None


# COMPRESSED is the residency in which the whole model stays in GPU
# memory and linear layers multiply from their fixed payloads
# (splitzip.offload_compressed, issue 36); it has no window or faults.
COMPRESSED = "compressed"


def _nbytes(shape_dtype) -> int:
    shape, dtype = shape_dtype
    n = torch.empty((), dtype=dtype).element_size()
    for d in shape:
        n *= d
    return n


def _decoder_layers(model: "torch.nn.Module"):
    """The name and ModuleList of the model's decoder layers: of the
    ModuleLists whose modules are all of one class, the one holding the
    most parameters (so not a list of experts inside the layers), then
    the longest."""
    best, most = None, None
    for name, m in model.named_modules():
        if isinstance(m, torch.nn.ModuleList) and len(m) >= 2 and len({type(x) for x in m}) == 1:
            key = (sum(p.numel() for p in m.parameters()), len(m))
            if best is None or key > most:
                best, most = (name, m), key
    if best is None:
        raise ValueError("no decoder layers found (a ModuleList of modules of one class)")
    return best


def _layer_pieces(layers, kept: Dict[str, "torch.Tensor"]) -> List[dict]:
    """For each decoder layer, rel name -> (parameter, pieces or None):
    the checkpoint tensors (as transformers was given them, kept) that
    tile the parameter's bytes. A parameter that is one of them unchanged
    (same storage) is its own piece; others are found by content."""
    by_ptr = {(t.data_ptr(), t.numel() * t.element_size()): name for name, t in kept.items() if t.numel()}
    index = None
    out = []
    for layer in layers:
        ps = {}
        for rel, p in layer.named_parameters():
            n = p.numel() * p.element_size()
            name = by_ptr.get((p.data_ptr(), n)) if p.device.type == "cpu" else None
            if name is not None:
                ps[rel] = (p.data, [(0, name, n)])
                continue
            if index is None:
                index = Index(kept)
            pcs = index.pieces(p.data) if p.device.type == "cpu" else None
            if pcs and any(off % 16 for off, _, _ in pcs):
                pcs = None  # a payload's destination must be 16-byte aligned: kept resident instead
            ps[rel] = (p.data, pcs)
        out.append(ps)
    return out


ROUTINGS = ("host", "device")


def _check_args(tier: str, gpu_bytes: Optional[int], experts, expert_prefetch, expert_window, window,
                expert_routing: str = "host") -> None:
    """Raise ValueError for a tier, GPU budget or expert setting offload
    does not take."""
    tiers([], tier, gpu_bytes)
    if expert_routing not in ROUTINGS:
        raise ValueError(f"expert_routing {expert_routing!r}: want one of {', '.join(ROUTINGS)}")
    if expert_routing == "device" and expert_prefetch:
        raise ValueError("expert_prefetch needs expert_routing='host' (its prediction runs on the host)")
    check_budget(experts)
    if experts is not None and tier == "cache":
        raise ValueError("experts= needs packs: give tier='pinned' or tier='gpu'")
    if isinstance(expert_prefetch, bool) or not isinstance(expert_prefetch, int) or expert_prefetch < 0:
        raise ValueError(f"expert_prefetch {expert_prefetch!r}: want a count of experts >= 0")
    if not 1 <= expert_window <= window:
        raise ValueError(f"expert_window {expert_window}: want 1 <= expert_window <= window ({window})")


def _capturing() -> bool:
    return torch.cuda.is_current_stream_capturing()


class Offload:
    """The runtime behind offload(): slots, packs, streams, hooks.
    close() frees them and the cache."""

    def __init__(self, model, cache: Cache, device: "torch.device", window: int, prefetch: int,
                 tier: str = "cache", gpu_bytes: Optional[int] = None, kept: Optional[dict] = None,
                 experts: Optional[Union[int, float]] = None, expert_prefetch: int = 0,
                 expert_window: int = 1, expert_routing: str = "host"):
        _check_args(tier, gpu_bytes, experts, expert_prefetch, expert_window, window, expert_routing)
        self.model, self.cache, self.device = model, cache, device
        self.dev = device.index or 0
        self.window, self.prefetch, self.tier = window, prefetch, tier
        self.prefix, self.layers = _decoder_layers(model)
        self.plan = Plan(len(self.layers), window, prefetch)  # checks window and prefetch
        self.stats = Stats()
        # Per layer: (rel, module, leaf) of each parameter in the slots, and
        # the pieces that fill them: (rel, byte offset, cache index, bytes,
        # checkpoint name), found by content (splitzip._pieces) in what
        # transformers built from the checkpoint tensors.
        self.params: List[List[tuple]] = []
        self.pieces: List[List[tuple]] = []
        self.resident: List[str] = []  # layer parameters no pieces tile: kept in GPU memory
        found = _layer_pieces(self.layers, kept or {})
        # A slot holds each parameter name (rel) that some layer offloads,
        # with the one shape and dtype every such layer has for it (layers
        # may differ: a dense first layer before mixture-of-experts ones).
        shapes, clash = {}, set()
        for ps in found:
            for rel, (p, pcs) in ps.items():
                if pcs is not None and shapes.setdefault(rel, (tuple(p.shape), p.dtype)) != (tuple(p.shape), p.dtype):
                    clash.add(rel)
        for rel in clash:
            del shapes[rel]
        if not shapes:
            raise ValueError("no parameter of the decoder layers is laid out as checkpoint tensors "
                             "(a dtype other than the checkpoint's, or a conversion that is no concatenation)")
        for i, (layer, ps) in enumerate(zip(self.layers, found)):
            params, pieces = [], []
            for rel, (p, pcs) in sorted(ps.items()):
                mod, leaf = _owner(layer, rel)
                if pcs is None or rel not in shapes:
                    mod._parameters[leaf] = torch.nn.Parameter(p.to(device), requires_grad=False)
                    self.resident.append(f"{self.prefix}.{i}.{rel}")
                    continue
                params.append((rel, mod, leaf))
                pieces += [(rel, off, cache.find(name), n, name) for off, name, n in pcs]
                mod._parameters[leaf] = torch.nn.Parameter(torch.empty(p.shape, dtype=p.dtype, device="meta"),
                                                           requires_grad=False)
            self.params.append(params)
            self.pieces.append(pieces)
        mods, units = self._expert_units(shapes) if experts is not None else ({}, {})
        self.layer_bytes = [sum(p[3] for p in ps) for ps in self.pieces]
        rows = {r for m in mods.values() for r in m[3]}  # zeroed: a row no expert filled yet holds no NaN
        shapes = [(rel, s, d) for rel, (s, d) in sorted(shapes.items())]
        # Slots past the first expert_window share those slots' expert rows.
        self.expert_window = expert_window if rows else window
        self.slots = []
        for k in range(window):
            slot = {}
            for r, s, d in shapes:
                if r in rows and k >= self.expert_window:
                    slot[r] = self.slots[k % self.expert_window][r]
                else:
                    t = (torch.zeros if r in rows else torch.empty)(s, dtype=d, device=device)
                    slot[r] = torch.nn.Parameter(t, requires_grad=False)
            self.slots.append(slot)
        self.stream = torch.cuda.Stream(device)
        self.handle = self.stream.cuda_stream
        self.done = [torch.cuda.Event() for _ in range(window)]  # pack tiers: slot s's last fault
        self.marks = [torch.cuda.Event() for _ in range(window)]  # pack tiers: compute before slot s's fault
        self.used: List[Optional[torch.cuda.Event]] = [None] * window  # cache tier: after the slot's last compute
        self.ready: Dict[int, torch.cuda.Event] = {}
        self.pending: Dict[int, concurrent.futures.Future] = {}
        self.events = []                   # cache tier: library events to check at the forward's end
        self.faulted: List[int] = []       # pack tiers: layers faulted since the last check
        self.lock = threading.Lock()
        self.in_forward = False
        self.enqueued = False  # pack tiers: this forward enqueued a fault on the upload stream
        self.where: List[str] = ["cache"] * len(self.layers)
        self.packs: List[Optional[tuple]] = [None] * len(self.layers)  # (tensor, PackInfo)
        self.pack_entropy: List[bool] = [False] * len(self.layers)  # a pack keeps its entropy payloads
        self.staging: List[Optional["torch.Tensor"]] = []
        self.pool = None
        if tier == "cache":
            self.pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="splitzip-offload")
        else:
            self._build_packs(gpu_bytes)
        self.experts = None
        if mods:
            kind = DeviceExperts if expert_routing == "device" else Experts
            self.experts = kind(self, mods, units, found, experts, expert_prefetch)
            self.stats.experts = self.experts.stats
        for i in range(len(self.layers)):
            t = self.stats.tiers[self.where[i]]
            t.layers += 1
            t.held += self.packs[i][1].staged if self.packs[i] else 0
        self.hooks = [model.register_forward_pre_hook(lambda *a: self._begin())]
        for i, layer in enumerate(self.layers):
            self.hooks.append(layer.register_forward_pre_hook(self._pre(i)))
            if self.pool is not None:  # a hook costs every layer's call, so only where it does something
                self.hooks.append(layer.register_forward_hook(self._post(i)))
        self.hooks.append(model.register_forward_hook(lambda *a: self._finish()))

    def _expert_units(self, shapes: dict):
        """For experts=: per layer, its experts module (name, module,
        experts, rels) whose parameters are all offloaded and tiled by
        pieces inside one expert's rows, and per (layer, expert) the
        pieces of its rows, taken out of the layer's pieces."""
        mods, units = {}, {}
        for i, layer in enumerate(self.layers):
            offloaded = {p[0] for p in self.params[i]}
            for name, mod, n, rels in expert_modules(layer):
                if not set(rels) <= offloaded:
                    continue
                split = [split_rows(self.pieces[i], r, _nbytes(shapes[r]), n) for r in rels]
                if any(x is None for x in split):
                    continue
                mods[i] = (name, mod, n, rels)
                for byrow in split:
                    for e, pcs in byrow.items():
                        units.setdefault((i, e), []).extend(pcs)
                self.pieces[i] = [p for p in self.pieces[i] if p[0] not in rels]
                break
        return mods, units

    # Packs.

    def _pack_args(self, i: int, pieces: Optional[List[tuple]] = None):
        ps, slot = self.pieces[i] if pieces is None else pieces, self.slots[self.plan.slot(i)]
        return [p[2] for p in ps], [slot[p[0]].data_ptr() + p[1] for p in ps], [p[3] for p in ps]

    def pack_pieces(self, i: int, pieces: Optional[List[tuple]], buf: "torch.Tensor", entropy: bool = False):
        """Write into buf (pinned) the pack of pieces of layer i (None: the
        layer's own) bound for its slot, its entropy payloads kept with
        entropy (decoded on the device by the scatter); returns its
        PackInfo."""
        idx, dsts, caps = self._pack_args(i, pieces)
        return self.cache.pack_into_ptr(idx, dsts, caps, buf.data_ptr(), buf.numel(), entropy=entropy)

    def _build_packs(self, gpu_bytes: Optional[int]) -> None:
        """Each layer's pack, checked: in GPU memory while gpu_bytes
        allows (tier gpu), else in pinned host memory, plus one staging
        buffer per slot for pinned layers' copies. A pinned layer's pack
        keeps its entropy payloads as they are stored (fewer bytes for
        each fault's copy over PCIe, decoded on the device after it); a
        GPU-tier layer's has them decoded when it is made (its faults
        copy nothing, and the fixed rate's decode is the faster). A pack
        is built in a pinned scratch buffer of the size the library bounds
        it by, and kept in one of the size it took."""
        n = len(self.layers)
        bounds = [self.cache.pack_size(self._pack_args(i)[0]) for i in range(n)]
        places = tiers(bounds, self.tier, gpu_bytes)
        self.pack_entropy = [w == "pinned" for w in places]
        bounds = [self.cache.pack_size(self._pack_args(i)[0], entropy=True) if self.pack_entropy[i] else bounds[i]
                  for i in range(n)]
        scratch = torch.empty(max(bounds), dtype=torch.uint8, pin_memory=True)
        for i, where in enumerate(places):
            info = self.pack_pieces(i, None, scratch, entropy=self.pack_entropy[i])
            if where == "gpu":
                held = torch.empty(info.staged, dtype=torch.uint8, device=self.device)
            else:
                held = torch.empty(info.staged, dtype=torch.uint8, pin_memory=True)
            held.copy_(scratch[:info.staged])
            torch.cuda.synchronize(self.device)  # scratch is reused
            self.packs[i], self.where[i] = (held, info), where
        pinned = [self.packs[i][1].staged for i in range(len(self.layers)) if self.where[i] == "pinned"]
        if pinned:
            self.staging = [torch.empty(max(pinned), dtype=torch.uint8, device=self.device)
                            for _ in range(self.window)]
        self.cache.gpu_prepare(self.dev)

    def _check_packs(self, eager: bool = True) -> None:
        """Raise what the scatter kernel found since the last check, naming
        the tensor whose pack bytes differ from a fresh pack (which then
        replaces it, so that the next forward works). eager: at the end
        of an eager forward (not after graph replays or a failure)."""
        faulted, self.faulted = self.faulted, []
        try:
            self.cache.scatter_check(self.dev, self.handle)
            if self.experts is not None:
                self.experts.check(torch.cuda.current_stream(self.device).cuda_stream)
        except Error as e:
            names = self._repair(sorted(set(faulted)))
            if self.experts is not None:
                names += self.experts.repair()
            raise error(e.status, f"{e.message}: a layer pack failed on the device"
                        f"{' (' + ', '.join(names) + ')' if names else ''}", e.filename) from None
        if self.experts is not None:
            self.experts.finish(eager)

    def _repair(self, layers: List[int]) -> List[str]:
        """Rebuild the packs of layers that differ from what the cache
        gives now; returns the tensors whose bytes differed."""
        torch.cuda.synchronize(self.device)
        names = []
        for i in layers:
            name = self.refresh(i, self.pieces[i], self.packs[i][0], self.pack_entropy[i])
            if name:
                names.append(name)
        torch.cuda.synchronize(self.device)
        return names

    def refresh(self, i: int, pieces: List[tuple], held: "torch.Tensor", entropy: bool = False) -> Optional[str]:
        """Compare held, the pack of pieces of layer i (made with entropy),
        with a fresh one; where they differ, overwrite held and return the
        tensor whose table entry or stored bytes hold the first differing
        byte."""
        fresh = torch.empty(self.cache.pack_size([p[2] for p in pieces], entropy=entropy), dtype=torch.uint8,
                            pin_memory=True)
        info = self.pack_pieces(i, pieces, fresh, entropy=entropy)
        fresh = fresh[:info.staged]
        diff = (held.cpu() != fresh).nonzero()
        if diff.numel() == 0:
            return None
        held.copy_(fresh)
        # The table, or the whole pack where descriptors follow it.
        table = fresh if info.entropy_count else fresh[:ENTRY * len(pieces)]
        k = owner(table.numpy().tobytes(), len(pieces), int(diff[0]), info.entropy_at, info.entropy_count)
        return pieces[k][4] if k is not None else f"layer {i}"

    # Faults.

    def _fault(self, i: int) -> None:
        """Enqueue layer i's fault-in from its pack on the upload stream
        (the hook's thread; it only enqueues)."""
        s = self.plan.slot(i)
        buf, info = self.packs[i]
        # The slot's last layer ran before this point of the compute
        # stream; waiting on it also joins a graph capture. The slot's own
        # event marks it: a wait takes the event as it is when enqueued,
        # so recording it again later changes no wait before.
        mark = self.marks[s]
        mark.record(self._compute)
        self.stream.wait_event(mark)
        base = buf.data_ptr()
        if self.where[i] == "pinned":
            stage = self.staging[s]
            with torch.cuda.stream(self.stream):
                stage[:buf.numel()].copy_(buf, non_blocking=True)
            base = stage.data_ptr()
        self.cache.scatter(self.dev, base, info, self.handle)
        done = self.done[s]
        done.record(self.stream)
        self.ready[i] = done
        self.faulted.append(i)
        self.enqueued = True

    def _upload(self, i: int) -> None:
        """Upload layer i from the cache into its slot on the upload
        stream (the worker thread)."""
        s = self.plan.slot(i)
        with torch.cuda.stream(self.stream):
            if self.used[s] is not None:
                self.stream.wait_event(self.used[s])
            idx, dsts, caps = self._pack_args(i)
            ev = self.cache.upload_batch(idx, dsts, caps, device=self.dev, stream=self.handle)
            done = torch.cuda.Event()
            done.record(self.stream)
        with self.lock:
            self.ready[i] = done
            self.events.append(ev)

    def _count(self, i: int) -> None:
        """Count layer i's fault, when it is started."""
        n = self.layer_bytes[i]
        st, t = self.stats, self.stats.tiers[self.where[i]]
        st.uploads += 1
        st.bytes += n
        st.layers[i] = st.layers.get(i, 0) + 1
        t.faults += 1
        t.bytes += n

    def _start(self, starts: List[int]) -> None:
        """Start the faults the plan asks for, in order."""
        for j in starts:
            self.ready.pop(j, None)
            self._count(j)
            if self.packs[j] is not None:
                self._fault(j)
            else:
                self.pending[j] = self.pool.submit(self._upload, j)

    # Hooks.

    def _begin(self) -> None:
        t0 = time.perf_counter()
        if self.in_forward:
            self._recover()
        self.in_forward = True
        self.enqueued = False
        self._compute = torch.cuda.current_stream(self.device)
        if self.pool is not None and _capturing():
            raise RuntimeError("splitzip.offload: tier 'cache' reads files during the forward and cannot be "
                               "captured in a CUDA graph; use tier='pinned' or tier='gpu'")
        if self.experts is not None and not self.experts.capturable and _capturing():
            raise RuntimeError("splitzip.offload: experts= with expert_routing='host' reads each forward's "
                               "routing on the host and cannot be captured in a CUDA graph; offload with "
                               "expert_routing='device'")
        self.stats.hooks_s += time.perf_counter() - t0

    def _recover(self) -> None:
        """The last forward ended in an exception: wait for what it
        enqueued, drop its events, and start from empty slots."""
        for f in list(self.pending.values()):
            try:
                f.result()
            except Exception:  # noqa: BLE001 - its error was raised, or is moot now
                pass
        self.pending.clear()
        self.stream.synchronize()
        with self.lock:
            evs, self.events = self.events, []
        for ev in evs:
            try:
                ev.wait()
            except Exception:  # noqa: BLE001
                pass
            ev.release()
        if self.pool is None:
            try:
                self._check_packs(eager=False)
            except Error:
                pass
        self.faulted = []
        if self.experts is not None:
            self.experts.forget()
        self.ready.clear()
        self.used = [None] * self.window
        self.plan = Plan(len(self.layers), self.window, self.prefetch)

    def _pre(self, i: int):
        def hook(module, args):
            t0 = time.perf_counter()
            hits = self.plan.hits
            _, starts = self.plan.before(i)
            self.stats.hits += self.plan.hits - hits
            self._start(starts)
            f = self.pending.pop(i, None)  # an upload of i outstanding
            if f is not None:
                t1 = time.perf_counter()
                f.result()  # raises the upload's error, naming the tensor
                self.stats.waited_s += time.perf_counter() - t1
            ev = self.ready.get(i)
            if ev is not None:
                self._compute.wait_event(ev)  # the forward's stream (_begin)
            s = self.plan.slot(i)
            for rel, mod, leaf in self.params[i]:
                mod._parameters[leaf] = self.slots[s][rel]
            self.stats.hooks_s += time.perf_counter() - t0
        return hook

    def _post(self, i: int):
        def hook(module, args, output):
            if self.pool is not None:
                ev = torch.cuda.Event()
                ev.record(torch.cuda.current_stream(self.device))
                self.used[self.plan.slot(i)] = ev
        return hook

    def _finish(self) -> None:
        """At the forward's end: check this one's faults (decode errors),
        then start the next forward's first faults."""
        t0 = time.perf_counter()
        if self.pool is None:
            # Checked before the next faults start, so that the host waits
            # only for this forward's faults (all of them enqueued before
            # its last layer ran), not for the next forward's copies.
            if not _capturing():
                self._check_packs()
            self._start(self.plan.end())
            # The compute stream waits for those faults: the next forward
            # (or graph replay) is ordered after them, and a capture joins
            # the upload stream back. A captured forward that enqueued
            # nothing there (every layer stayed in its slot) has nothing
            # to join, and its capture may not wait for uncaptured work.
            if self.enqueued or not _capturing():
                self._compute.wait_stream(self.stream)
            self.ready.clear()
        else:
            self._start(self.plan.end())
            with self.lock:
                evs, self.events = self.events, []
            for ev in evs:
                ev.wait()
                ev.release()
        self.in_forward = False
        self.stats.hooks_s += time.perf_counter() - t0

    def check(self) -> None:
        """Raise what the device found in the faults since the last check
        (for forwards replayed from a CUDA graph, whose hooks do not run)."""
        if self.pool is None:
            self._check_packs(eager=False)

    def close(self) -> None:
        for h in self.hooks:
            h.remove()
        for f in list(self.pending.values()):
            try:
                f.result()
            except Exception:  # noqa: BLE001 - closing anyway
                pass
        if self.pool is not None:
            self.pool.shutdown()
        self.stream.synchronize()
        for ev in self.events:
            ev.release()
        self.events = []
        if self.experts is not None:
            self.experts.close()
        self.slots, self.packs, self.staging = [], [], []
        self.cache.close()


def capture(model, example: "torch.Tensor", warmup: int = 2, **kwargs):
    """Capture the forward of model (a transformers causal LM, offloaded
    with tier "pinned" or "gpu", or resident) on input ids like example
    in a CUDA graph, after warmup eager forwards on a side stream as
    torch.cuda.graph wants; kwargs go to the forward (use_cache=False
    keeps it free of a growing cache). Returns (graph, static_input,
    static_logits): copy new input ids of the same shape into
    static_input, call graph.replay(), read static_logits. For an
    offloaded model, model.splitzip_offload.check() after replays raises
    what the device found in the faults."""
    static = example.clone()
    side = torch.cuda.Stream(example.device)
    side.wait_stream(torch.cuda.current_stream(example.device))
    with torch.no_grad(), torch.cuda.stream(side):
        for _ in range(warmup):
            model(static, **kwargs)
    torch.cuda.current_stream(example.device).wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.no_grad(), torch.cuda.graph(g):
        out = model(static, **kwargs).logits
    return g, static, out


def offload(cache: str, config, device: Union[str, int, "torch.device"] = "cuda:0", window: int = 2,
            prefetch: int = 1, source: Optional[str] = None, model_class=None, tier: str = "cache",
            gpu_bytes: Optional[int] = None, experts: Optional[Union[int, float]] = None,
            expert_prefetch: int = 0, expert_window: int = 1, expert_routing: str = "host", linears: str = "all",
            **kwargs):
    """The model at config (a folder with config.json, such as a hub
    snapshot, or a config) with its decoder layers offloaded: window
    layers' weights in GPU memory at a time, the next prefetch layers
    faulted in ahead, each from its tier: "cache" (read from the cache's
    files every time), "pinned" (packs in pinned host memory) or "gpu"
    (packs in GPU memory, at most gpu_bytes of them, default all; the rest
    pinned). tier "compressed" is no window: the whole model stays in GPU
    memory, its linear layers as fixed payloads that splitzip.nn's kernel
    multiplies from (window and prefetch are ignored; gpu_bytes and the
    expert settings are refused; model.splitzip_offload is a
    splitzip.offload_compressed.Compressed); linears="faster" keeps
    BF16 the linear layers whose shape the kernel multiplies slower than
    torch at batch 1 on this device (timed at setup). transformers
    builds the model (kwargs are its from_pretrained arguments, such as
    attn_implementation) on the CPU from the cache's
    tensors, converting them as it does from the files; each layer
    parameter's bytes are then traced back to the checkpoint tensors that
    tile them, and faults write those tensors into the slots. Everything
    but the layers' parameters moves to device. Returns the model (eval
    mode); model.splitzip_offload is the Offload (stats, check(), close()).

    experts (tiers pinned and gpu): fault in only the experts each
    mixture-of-experts layer's router picks (splitzip.offload_experts),
    with at most this much GPU memory for hot experts' packs: a byte count
    (int) or a fraction of all experts' packs (float); the packs of the
    next such layer's expert_prefetch likeliest experts for each token
    are copied ahead (default 0: none, which decoded fastest on the
    H200, docs/TRANSFORMERS.md); the fused expert tensors the layers
    compute with are expert_window
    sets (1 <= expert_window <= window) shared by the window's slots, so
    a window as long as the model keeps every layer's other parameters
    resident while experts come and go. None: experts move with their
    layer. expert_routing: where a forward decides which experts to
    write, "host" (reads the routing back each layer; adapts its pool at
    every call; not capturable in a CUDA graph) or "device" (device-side
    tables and one kernel that reads unpooled experts' packs from pinned
    memory; no host wait; capturable, splitzip.offload_routed)."""
    device = torch.device(f"cuda:{device}" if isinstance(device, int) else device)
    if device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    if tier == COMPRESSED:
        if (experts, gpu_bytes, expert_prefetch, expert_window, expert_routing) != (None, None, 0, 1, "host"):
            raise ValueError("tier 'compressed' keeps the whole model in GPU memory: gpu_bytes= and the expert "
                             "settings do not apply")
        if linears not in LINEARS:
            raise ValueError(f"linears {linears!r}: want one of {', '.join(LINEARS)}")
    else:
        _check_args(tier, gpu_bytes, experts, expert_prefetch, expert_window, window,
                    expert_routing)  # before anything loads
        if linears != "all":
            raise ValueError("linears= chooses the linear layers of tier 'compressed'")
    if kwargs.get("device_map") not in (None, "cpu"):
        raise ValueError("offload places the model itself: give device=, not device_map=")
    kwargs["device_map"] = "cpu"
    c = Cache(cache, source)
    try:
        model, src, _ = load(c, config, model_class, keep=True, **kwargs)
        if tier == COMPRESSED:
            model.splitzip_offload = Compressed(model, c, device, src.kept, linears)
            src.kept.clear()
            return model
        _, layers = _decoder_layers(model)
        in_layers = {id(p) for p in layers.parameters()}
        for p in model.parameters():
            if id(p) not in in_layers:
                p.data = p.data.to(device)
        for mod in model.modules():
            for k, b in mod._buffers.items():
                if b is not None:
                    mod._buffers[k] = b.to(device)
        o = Offload(model, c, device, window, prefetch, tier=tier, gpu_bytes=gpu_bytes, kept=src.kept,
                    experts=experts, expert_prefetch=expert_prefetch, expert_window=expert_window,
                    expert_routing=expert_routing)
        src.kept.clear()
    except Exception:
        c.close()
        raise
    model.splitzip_offload = o
    return model
