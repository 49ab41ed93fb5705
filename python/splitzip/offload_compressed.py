"""The "compressed" residency of splitzip.offload (issue 36): the whole
model lives in GPU memory, and each linear layer whose weight the cache
stores as a fixed payload keeps that payload (about 12 bits a weight)
instead of the BF16 weight; splitzip.nn.FixedLinear multiplies from it,
decoding in registers, so the BF16 weight is never written out. The
other parameters and the buffers are resident as transformers built
them.

    from splitzip.offload import offload
    model = offload("llama.sz", "path/to/model", tier="compressed")
    out = model.generate(ids, max_new_tokens=64, cache_implementation="static")

A linear layer is matched to its checkpoint tensor by storage, not by
name: transformers builds the model on the CPU from the cache's tensors
(its own from_pretrained, so its renames apply) and a Linear whose
weight is one of those tensors unchanged takes that tensor's payload. A
weight transformers converted (fused, transposed, cast), one stored raw
or entropy-coded, one that is not BF16, or one whose in_features is not a
multiple of 16 stays a BF16 Linear in GPU memory; Compressed.kept says
which and why. A Linear whose weight is tied to another parameter (an
output projection tied to the embeddings) stays BF16 too: the embedding
keeps its BF16 weight, and a payload beside it would add memory. Only
plain torch.nn.Linear modules are replaced (a subclass may compute
otherwise); the others are kept and named.

linears="faster" keeps BF16 also where the fused kernel is slower than
torch's BF16 product on this device: for each shape it would replace, it
times both at batch 1 once (CUDA events, the L2 flushed before each,
median of 15) and replaces only where the kernel wins. That trades memory for
speed, and which layers stay BF16 depends on the device: on an H100 the
kernel was 0.95x cuBLAS on a 14336x4096 matrix and 1.70x on 4096x4096
(docs/PERF.md), so such a choice may keep the largest layers BF16.
The results are not bit-exact against the resident model (the kernel's
sums are rounded in another order than cuBLAS's).
"""

import statistics
from dataclasses import dataclass
from typing import Dict, List, Tuple

import torch

from ._lib import Cache
from .nn import FixedLinear


@dataclass
class CompressedStats:
    """What the compressed residency holds: linear layers that multiply
    from payloads, their payloads' bytes in GPU memory, and the bytes
    their weights take in BF16."""
    layers: int = 0
    held: int = 0
    raw: int = 0


def _why_not(mod: "torch.nn.Linear", name: str, cache: Cache):
    """None if the cache's tensor name can be mod's payload, else why not."""
    w = mod.weight
    if w.dtype != torch.bfloat16:
        return f"weight is {w.dtype}, not BF16"
    if mod.in_features % 16:
        return f"in_features {mod.in_features} is not a multiple of 16"
    if not w.is_contiguous():
        return "weight is a strided view of a checkpoint tensor (a transpose), not the tensor"
    info = cache.info(name)
    if tuple(info.shape) != (mod.out_features, mod.in_features):
        return f"checkpoint tensor {name} has shape {tuple(info.shape)}"
    if not info.compressed:
        return f"checkpoint tensor {name} is not stored as a fixed payload (raw or entropy-coded)"
    return None


# LINEARS are the choices of which linear layers a compressed residency
# multiplies from payloads: every one the kernel takes, or only those
# whose shape it multiplies faster than BF16 here.
LINEARS = ("all", "faster")


def _l2_bytes(device: "torch.device") -> int:
    """The device's L2 size (64 MiB where torch does not say)."""
    return int(getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 0) or 64 << 20)


def _median_us(fn, flush: "torch.Tensor", n: int = 15) -> float:
    """Median device microseconds of fn over n runs after three, each
    timed by CUDA events after flush (a buffer twice the L2) is cleared.
    The device then spins for about half a millisecond, so that the host
    has enqueued fn and the closing event before the opening one is
    reached: the events time the device's work, not the host's call."""
    pairs = []
    for _ in range(n + 3):
        flush.zero_()
        torch.cuda._sleep(1_000_000)
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        pairs.append((a, b))
    torch.cuda.synchronize()
    return statistics.median(a.elapsed_time(b) for a, b in pairs[3:]) * 1e3


class Compressed:
    """The runtime behind offload(tier="compressed"): replaced, the
    (module, checkpoint tensor) pairs of the linear layers that multiply
    from payloads; kept, the (module, reason) pairs of those that stay
    BF16; stats. check() raises what the kernels found wrong with a
    payload; close() closes the cache, after which the model's
    FixedLinear layers cannot run."""

    def __init__(self, model: "torch.nn.Module", cache: Cache, device: "torch.device",
                 kept_tensors: Dict[str, "torch.Tensor"], linears: str = "all"):
        if linears not in LINEARS:
            raise ValueError(f"linears {linears!r}: want one of {', '.join(LINEARS)}")
        self.model, self.cache, self.device = model, cache, device
        self.dev = device.index if device.index is not None else torch.cuda.current_device()
        self.replaced: List[Tuple[str, str]] = []
        self.kept: List[Tuple[str, str]] = []
        self.stats = CompressedStats()
        self.timings: Dict[Tuple[int, int], Tuple[float, float]] = {}  # linears="faster": (fused, BF16) µs a shape
        by_ptr = {(t.data_ptr(), t.numel() * t.element_size()): name
                  for name, t in kept_tensors.items() if t.numel() and t.device.type == "cpu"}
        made: Dict[str, Tuple["torch.Tensor", bytes]] = {}  # checkpoint tensor -> payload on device, header
        owners: Dict[int, List[str]] = {}  # a parameter's id -> the names it has in the model (tied: several)
        for mname, m in model.named_modules():
            for pname, p in m._parameters.items():
                if p is not None:
                    owners.setdefault(id(p), []).append(f"{mname}.{pname}" if mname else pname)
        for name, mod in list(model.named_modules()):
            if not name or not isinstance(mod, torch.nn.Linear):
                continue
            if type(mod) is not torch.nn.Linear:
                self.kept.append((name, f"a {type(mod).__name__}, not a plain Linear: its forward may differ"))
                continue
            w = mod.weight
            src = by_ptr.get((w.data_ptr(), w.numel() * w.element_size())) if w.device.type == "cpu" else None
            if src is None:
                self.kept.append((name, "weight is no checkpoint tensor unchanged (converted by transformers)"))
                continue
            tied = [o for o in owners.get(id(w), []) if o != f"{name}.weight"]
            if tied:
                self.kept.append((name, f"weight tied to {tied[0]}, which stays BF16: a payload would add memory"))
                continue
            why = _why_not(mod, src, cache)
            if why is None and linears == "faster":
                why = self._slower(src, mod, made)
            if why is None:
                try:
                    fixed = self._linear(src, mod, made)
                except ValueError as e:
                    why = str(e)
            if why is not None:
                self.kept.append((name, why))
                continue
            parent, _, leaf = name.rpartition(".")
            setattr(model.get_submodule(parent) if parent else model, leaf, fixed)
            self.replaced.append((name, src))
            self.stats.layers += 1
            self.stats.raw += w.numel() * w.element_size()
        self.stats.held = sum(payload.numel() for payload, _ in made.values())
        for p in model.parameters():
            if p.device != device:
                p.data = p.data.to(device)
        for mod in model.modules():
            for k, b in mod._buffers.items():
                if b is not None and b.device != device:
                    mod._buffers[k] = b.to(device)

    def _linear(self, src: str, mod: "torch.nn.Linear", made: Dict[str, Tuple["torch.Tensor", bytes]]) -> FixedLinear:
        """A FixedLinear of checkpoint tensor src with mod's bias; layers
        of one tensor share its payload in GPU memory."""
        bias = None if mod.bias is None else mod.bias.detach()
        if src in made:
            payload, head = made[src]
            return FixedLinear(self.cache, payload, head, mod.out_features, mod.in_features, bias)
        fixed = FixedLinear.from_cache(self.cache, src, device=self.dev, bias=bias)
        made[src] = (fixed.payload, fixed.head)
        return fixed

    def _slower(self, src: str, mod: "torch.nn.Linear", made) -> "str | None":
        """Why mod stays BF16 under linears="faster": the fused kernel,
        timed once a shape, is slower than torch's BF16 product; None if
        it is faster."""
        shape = (mod.out_features, mod.in_features)
        if shape not in self.timings:
            had = src in made
            try:
                fixed = self._linear(src, mod, made)
            except ValueError as e:
                return str(e)
            w = mod.weight.detach().to(self.device)
            # The events, the spin and the synchronization act on the
            # current device: make it the one the layers run on.
            with torch.cuda.device(self.device), torch.no_grad():
                x = torch.randn(1, mod.in_features, device=self.device).to(torch.bfloat16)
                flush = torch.empty(2 * _l2_bytes(self.device), dtype=torch.uint8, device=self.device)
                b = None if mod.bias is None else mod.bias.detach().to(self.device)
                self.timings[shape] = (_median_us(lambda: fixed(x), flush),
                                       _median_us(lambda: torch.nn.functional.linear(x, w, b), flush))
            del w, b, flush, fixed
            if self.timings[shape][0] > self.timings[shape][1] and not had:
                del made[src]  # its payload was uploaded for the timing only
        fused, bf16 = self.timings[shape]
        if fused > bf16:
            return f"fused kernel slower than BF16 at batch 1 here: {fused:.1f} us against {bf16:.1f} us"
        return None

    def check(self) -> None:
        """Wait for the current stream and raise Error if a product found
        a payload bad since the last check (after eager forwards or graph
        replays alike)."""
        self.cache.gemv_check(self.dev, torch.cuda.current_stream(self.device).cuda_stream)

    def close(self) -> None:
        self.cache.close()


__all__ = ["Compressed", "CompressedStats", "LINEARS"]
