"""Expert-granular offload of mixture-of-experts layers: splitzip.offload
with experts= faults in only the experts a layer's router picks.

A layer computes with fused expert tensors ([experts, ...], built by
transformers from the checkpoint's separate experts) of one of
expert_window row sets, one row per expert, zeroed at first; the window's
slots share them (slot s uses set s mod expert_window), so the layers'
other parameters can stay resident in a window as long as the model
while the experts come and go. Each expert's share of the checkpoint (its
rows' pieces) gets a pack of its own in pinned host memory, whose table
writes into that expert's rows of the layer's set: a layer always runs in
the same slot, so the pack's device addresses never change. A pool of GPU
buffers holds packs: the hot experts (needed most often) and a ring of
recent ones (splitzip.offload_plan.ExpertPlan decides).

A forward pre-hook on the experts module reads the routed expert indices
it is called with (one small device-to-host copy, as transformers' own
expert loop does), then on the upload stream: copies the packs of routed
experts the pool lacks into buffers, launches the scatter of each routed
expert whose row does not hold it, and makes the compute stream wait.
Expert indices and weights go to the module unchanged, so its forward,
whatever the implementation, runs the same kernels on the same bytes as
the resident model's. The same copy brings the next mixture-of-experts
layer's likely experts: that layer's router (kept resident, a few KiB),
applied to this layer's expert input, names them (the expert_prefetch
likeliest for each token), and their packs are copied into the pool
while this layer computes.

The routed experts are known on the host only, so such a forward cannot
be captured in a CUDA graph; with expert_routing="device" the decision is
made on the device instead (splitzip.offload_routed), and it can.
"""

import time
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple, Union

import torch

from .offload_plan import ExpertPlan


@dataclass
class ExpertStats:
    """What the expert-granular offload did: routed experts (one per
    layer call and expert), found in their row already (row_hits), in the
    pool (pool_hits, prefetch_hits of them brought by a prediction),
    copied from pinned memory on demand (copies) or by prediction
    (prefetches); the bytes copied over PCIe and written into rows; the
    pool's buffers and bytes, the experts' packs held in pinned memory,
    and the GPU bytes that hold experts (pool and slot rows) against all
    experts' raw bytes (resident_fraction). predicted: experts a
    prediction named (copied or already in the pool), predicted_right:
    those the layer then routed to."""
    routed: int = 0
    row_hits: int = 0
    pool_hits: int = 0
    prefetch_hits: int = 0
    copies: int = 0
    prefetches: int = 0
    predicted: int = 0
    predicted_right: int = 0
    copied_bytes: int = 0
    scattered_bytes: int = 0
    buffers: int = 0
    pool_bytes: int = 0
    pinned_bytes: int = 0
    expert_bytes: int = 0
    resident_fraction: float = 0.0


def expert_modules(layer: "torch.nn.Module") -> List[Tuple[str, "torch.nn.Module", int, List[str]]]:
    """The modules of a decoder layer that hold fused experts: (name,
    module, experts, parameter names relative to the layer). Such a
    module has an int num_experts and parameters whose first dimension
    is that count, one of them at least 3-D (an expert's weight matrix):
    a router's [experts, hidden] weight alone is not one."""
    out = []
    for name, m in layer.named_modules():
        n = getattr(m, "num_experts", None)
        if not isinstance(n, int) or n < 2:
            continue
        ps = [(leaf, p) for leaf, p in m.named_parameters(recurse=False) if p.dim() >= 1 and p.shape[0] == n]
        if any(p.dim() >= 3 for _, p in ps):
            out.append((name, m, n, [f"{name}.{leaf}" if name else leaf for leaf, _ in ps]))
    return out


def split_rows(pieces: List[tuple], rel: str, nbytes: int, experts: int) -> Optional[Dict[int, List[tuple]]]:
    """The pieces (rel, off, index, bytes, name) of parameter rel by the
    expert whose row holds them, or None when one straddles two rows (a
    checkpoint that stores the experts fused)."""
    row = nbytes // experts
    out: Dict[int, List[tuple]] = {}
    for pc in pieces:
        if pc[0] != rel:
            continue
        e = pc[1] // row
        if row * experts != nbytes or pc[1] + pc[3] > (e + 1) * row:
            return None
        out.setdefault(e, []).append(pc)
    return out


def _router(name: str, experts: int, params: dict, device) -> Optional[tuple]:
    """A resident copy of the router beside the experts module name: the
    weight ([experts, hidden]) and bias of the sibling module that has one.
    params: rel -> (CPU tensor, pieces) of the layer."""
    parent = name.rpartition(".")[0]
    for rel, (p, _) in params.items():
        head, _, leaf = rel.rpartition(".")
        if leaf != "weight" or p.dim() != 2 or p.shape[0] != experts or head.rpartition(".")[0] != parent:
            continue
        if head == name:
            continue
        b = params.get(f"{head}.bias")
        return p.to(device), (b[0].to(device) if b is not None and b[0].shape == (experts,) else None)
    return None


def check_budget(budget) -> None:
    """Raise ValueError unless budget is what offload's experts= takes."""
    if budget is None:
        return
    if isinstance(budget, bool) or not isinstance(budget, (int, float)):
        raise ValueError(f"experts={budget!r}: want a byte count (int) or a fraction (float)")
    if isinstance(budget, float) and not 0 < budget <= 1:
        raise ValueError(f"experts={budget}: want a fraction in (0, 1] or a byte count")
    if isinstance(budget, int) and budget < 1:
        raise ValueError(f"experts={budget}: want a byte count >= 1")


def _tensor_args(args, kwargs):
    for a in list(args) + list(kwargs.values()):
        if isinstance(a, torch.Tensor):
            yield a


class Experts:
    """The expert-granular part of an Offload (o): experts' packs in
    pinned memory, the pool, the hooks on the experts modules."""

    capturable = False  # its hooks read the routing on the host
    # An expert's pack keeps its entropy payloads as they are stored:
    # fewer bytes for each copy over PCIe, decoded on the device by the
    # scatter (the routed scatter decodes none: DeviceExperts).
    entropy = True

    def __init__(self, o, mods: Dict[int, tuple], units: Dict[Tuple[int, int], List[tuple]],
                 found: List[dict], budget: Union[int, float], prefetch: int):
        self.o, self.mods, self.units = o, mods, units
        self.experts = max(m[2] for m in mods.values())
        self.moe = sorted(mods)  # layers with an experts module, in order
        self.next = {a: b for a, b in zip(self.moe, self.moe[1:])}
        self.routers = {i: _router(mods[i][0], mods[i][2], found[i], o.device) for i in self.moe} \
            if prefetch > 0 else {}
        self.predict = prefetch
        self.stats = ExpertStats()
        self.faulted: List[Tuple[int, int]] = []
        self.guesses: Dict[int, List[int]] = {}  # layer -> experts predicted for its next call
        self.mark, self.done = torch.cuda.Event(), torch.cuda.Event()
        self.packs: Dict[Tuple[int, int], tuple] = {}  # (layer, expert) -> (held, off, info)
        self.held: List["torch.Tensor"] = []
        self._build(budget)
        self.hooks = [mods[i][1].register_forward_pre_hook(self._pre(i), with_kwargs=True) for i in self.moe]

    def _build(self, budget: Union[int, float]) -> None:
        """Each expert's pack in one pinned tensor per layer, then the pool."""
        o, st = self.o, self.stats
        for i in self.moe:
            keys = sorted(k for k in self.units if k[0] == i)
            bounds = [o.cache.pack_size([pc[2] for pc in self.units[k]], entropy=self.entropy) for k in keys]
            held = torch.empty(sum((b + 255) & ~255 for b in bounds), dtype=torch.uint8, pin_memory=True)
            off = 0
            for k, b in zip(keys, bounds):
                info = o.pack_pieces(i, self.units[k], held[off:off + b], entropy=self.entropy)
                self.packs[k] = (held, off, info)
                st.expert_bytes += sum(pc[3] for pc in self.units[k])
                off += (b + 255) & ~255
            self.held.append(held)
            st.pinned_bytes += held.numel()
        biggest = max(info.staged for _, _, info in self.packs.values())
        packed = sum(info.staged for _, _, info in self.packs.values())
        if isinstance(budget, float):
            budget = int(budget * packed)
        n = max(1, min(budget // biggest, len(self.packs)))
        self.pool = [torch.empty(biggest, dtype=torch.uint8, device=o.device) for _ in range(n)]
        self.plan = ExpertPlan(o.expert_window, self.experts, n)
        rows = sum(o.slots[0][rel].numel() * o.slots[0][rel].element_size()
                   for i in self.moe[:1] for rel in self.mods[i][3])
        st.buffers, st.pool_bytes = n, n * biggest
        st.resident_fraction = (st.pool_bytes + o.expert_window * rows) / max(1, st.expert_bytes)

    def _pre(self, i: int):
        def hook(module, args, kwargs):
            o = self.o
            t0 = time.perf_counter()
            routed = x = None
            for a in _tensor_args(args, kwargs):
                if routed is None and not a.is_floating_point() and a.dtype != torch.bool:
                    routed = a
                elif x is None and a.is_floating_point():
                    x = a
            if routed is None:
                raise RuntimeError(f"splitzip.offload: the experts of layer {i} were called without expert indices")
            n = self.experts
            mask = torch.zeros((2, n + 1), dtype=torch.bool, device=routed.device)
            mask[0].index_fill_(0, routed.reshape(-1).long().clamp(0, n), True)
            j = self.next.get(i)
            r = self.routers.get(j) if j is not None else None
            if r is not None and x is not None and r[0] is not None and x.shape[-1] == r[0].shape[1]:
                with torch.no_grad():
                    logits = torch.nn.functional.linear(x.reshape(-1, x.shape[-1]), r[0], r[1])
                    top = logits.topk(min(self.predict, n), dim=-1).indices
                mask[1].index_fill_(0, top.reshape(-1), True)
            want, guess = mask[:, :n].tolist()
            need = [e for e in range(n) if want[e]]
            p, st = self.plan, self.stats
            g = self.guesses.pop(i, None)
            if g is not None:
                st.predicted += len(g)
                st.predicted_right += sum(1 for e in g if want[e])
            self._fault(i, need)
            if j is not None and r is not None:
                self.guesses[j] = [e for e in range(n) if guess[e]]
                self._prefetch(j, self.guesses[j])
            st.row_hits, st.pool_hits, st.copies = p.row_hits, p.pool_hits, p.copies
            st.prefetches, st.prefetch_hits = p.prefetches, p.prefetch_hits
            o.stats.hooks_s += time.perf_counter() - t0
            return None
        return hook

    def _rows(self, i: int) -> int:
        """The expert row set layer i computes with."""
        return self.o.plan.slot(i) % self.o.expert_window

    def _copy(self, key: Tuple[int, int], k: int) -> None:
        held, off, info = self.packs[key]
        self.pool[k][:info.staged].copy_(held[off:off + info.staged], non_blocking=True)
        self.stats.copied_bytes += info.staged

    def _fault(self, i: int, need: List[int]) -> None:
        """Bring layer i's routed experts into their rows (upload stream),
        and make the compute stream wait for them."""
        o, st = self.o, self.stats
        acts = self.plan.need(i, self._rows(i), need)
        st.routed += len(acts)
        work = [a for a in acts if a[1] != ExpertPlan.ROW]
        if not work:
            return
        # Rows are written once the compute stream is past what it has
        # been given, which reads them.
        self.mark.record(o._compute)
        o.stream.wait_event(self.mark)
        with torch.cuda.stream(o.stream):
            for e, what, k in work:
                key = (i, e)
                if what == ExpertPlan.COPY:
                    self._copy(key, k)
                info = self.packs[key][2]
                o.cache.scatter(o.dev, self.pool[k].data_ptr(), info, o.handle)
                st.scattered_bytes += sum(pc[3] for pc in self.units[key])
                self.faulted.append(key)
        self.done.record(o.stream)
        o._compute.wait_event(self.done)

    def _prefetch(self, j: int, guess: List[int]) -> None:
        """Copy the packs of layer j's likely experts into the pool."""
        todo = self.plan.prefetch(j, self._rows(j), [e for e in guess if (j, e) in self.packs])
        if not todo:
            return
        with torch.cuda.stream(self.o.stream):
            for e, k in todo:
                self._copy((j, e), k)

    def repair(self) -> List[str]:
        """Rebuild the packs of experts faulted since the last check whose
        bytes differ from a fresh pack; returns the tensors that differed."""
        names = []
        for key in sorted(set(self.faulted)):
            held, off, info = self.packs[key]
            name = self.o.refresh(key[0], self.units[key], held[off:off + info.staged], self.entropy)
            if name:
                names.append(name)
        self.faulted = []
        return names

    def check(self, stream: int) -> None:
        """Raise what the kernel found in expert faults enqueued on
        stream; host routing faults on the offload's upload stream, which
        the caller checks."""

    def finish(self, eager: bool = True) -> None:
        """After a check found no error (eager: at a forward's end): the
        faults since the last check need no repair."""
        self.faulted = []

    def forget(self) -> None:
        self.faulted = []
        self.guesses.clear()
        self.plan.forget()

    def close(self) -> None:
        for h in self.hooks:
            h.remove()
        self.hooks, self.pool, self.held, self.packs = [], [], [], {}
