"""Linear layers that multiply straight from fixed payloads on the GPU
(issue 36): the weight stays in GPU memory as its fixed payload (12 bits
a weight) and is decoded in registers on the way to the multiply, never
written out (docs/DESIGN.md 3.4).

    from splitzip import Cache
    from splitzip.nn import FixedLinear

    with Cache("llama.sz") as c:
        proj = FixedLinear.from_cache(c, "model.layers.0.mlp.down_proj.weight", device=0)
    y = proj(x)  # x: (..., in_features) BF16 on the same device

The product runs as the custom op ``splitzip::gemv_fixed`` (torch 2.4 and
later), so it works under CUDA graph capture and ``torch.compile``; it
takes up to 16 rows of input a launch (decode steps), more in launches of
16 (prefill: correct, not fast yet). Its result equals a fixed reduction
order bit for bit and is within 2 BF16 ulps (plus the fp32 accumulation)
of ``x @ W.T``, before the bias is added.
"""

import operator
import threading
from typing import Dict, List, Optional

import torch

from ._lib import Cache, Error, error

# MAX_BATCH is the most rows of input one launch multiplies.
MAX_BATCH = 16

FIXED_MAGIC = b"SZBF"

# The payload headers and caches of the layers, by the integer id the
# custom op is passed (an op takes tensors and numbers, not bytes).
_layers: Dict[int, "tuple"] = {}
_layers_lock = threading.Lock()
_next_id = [0]
_op = None


def _gemv_op():
    """The custom op splitzip::gemv_fixed, defined on first use (once, in
    whichever thread comes first)."""
    global _op
    op = _op  # set once, under the lock: no lock on a forward's path
    if op is not None:
        return op
    with _layers_lock:
        if _op is None:
            _op = _define_op()
        return _op


def _define_op():
    if not hasattr(torch, "library") or not hasattr(torch.library, "custom_op"):
        raise RuntimeError(f"splitzip.nn needs torch 2.4 or later (torch.library.custom_op); this is torch {torch.__version__}")

    @torch.library.custom_op("splitzip::gemv_fixed", mutates_args=(), device_types="cuda")
    def gemv_fixed(payload: torch.Tensor, x: torch.Tensor, layer: int, rows: int) -> torch.Tensor:
        cache, head = _layers[layer]
        y = torch.empty((x.shape[0], rows), dtype=torch.bfloat16, device=x.device)
        stream = torch.cuda.current_stream(x.device).cuda_stream
        dev = x.device.index if x.device.index is not None else torch.cuda.current_device()
        for lo in range(0, x.shape[0], MAX_BATCH):
            n = min(MAX_BATCH, x.shape[0] - lo)
            cache.gemv(dev, payload.data_ptr(), payload.numel(), head, rows, x.shape[1], x[lo].data_ptr(),
                       y[lo].data_ptr(), n, stream)
        return y

    @gemv_fixed.register_fake
    def _(payload, x, layer, rows):
        return x.new_empty((x.shape[0], rows))

    return gemv_fixed


class FixedLinear(torch.nn.Module):
    """A Linear whose BF16 weight (out_features x in_features) is kept in
    GPU memory as its fixed payload. Build it with from_cache (or with the
    constructor, from a payload already in GPU memory and its header's
    64 bytes); the Cache it came from must stay
    open while the layer is used (its handle runs the kernels). A bias, if
    given, is kept in BF16 on the payload's device."""

    def __init__(self, cache: Cache, payload: torch.Tensor, head: bytes, out_features: int, in_features: int,
                 bias: Optional[torch.Tensor] = None):
        super().__init__()
        if payload.dtype != torch.uint8 or payload.dim() != 1 or not payload.is_cuda:
            raise ValueError("payload is a 1-D uint8 CUDA tensor")
        if head[:4] != FIXED_MAGIC or len(head) != 64:
            raise ValueError("head is the 64-byte header of a fixed payload")
        if in_features % 16:
            raise ValueError(f"in_features {in_features} is not a multiple of 16")
        if payload.data_ptr() % 16:
            raise ValueError("the payload must be 16-byte aligned on the device")
        if payload.numel() < 64 or bytes(payload[:64].cpu().numpy().tobytes()) != bytes(head):
            raise ValueError("head is not the payload's header")
        self.in_features, self.out_features = in_features, out_features
        self.head = bytes(head)
        self.register_buffer("payload", payload)
        self.bias = None if bias is None else torch.nn.Parameter(
            bias.to(device=payload.device, dtype=torch.bfloat16), requires_grad=False)
        with _layers_lock:
            self._layer = _next_id[0]
            _next_id[0] += 1
            _layers[self._layer] = (cache, bytes(head))
        dev = payload.device.index if payload.device.index is not None else torch.cuda.current_device()
        cache.gemv_prepare(dev)  # the kernels loaded now, not during a graph capture

    @classmethod
    def from_cache(cls, cache: Cache, name: str, device: int = 0, bias: Optional[torch.Tensor] = None) -> "FixedLinear":
        """The layer of weight name, a 2-D BF16 tensor the cache stores as
        a fixed payload (compress's default codec for BF16 weights), read
        and checked whole, then copied to device."""
        try:
            device = operator.index(device)
        except TypeError:
            raise TypeError(f"device must be a CUDA device's ordinal (an int), not {device!r}: the fused "
                            "product runs on a GPU only") from None
        if not torch.cuda.is_available():
            # torch's own AssertionError ("not compiled with CUDA") is no
            # splitzip.Error: say it as splitzip.torch.load_file does.
            raise error(6, f"torch {torch.__version__} finds no CUDA device for cuda:{device}")
        info = cache.info(name)
        if info.dtype != "BF16" or len(info.shape) != 2:
            raise ValueError(f"{name}: a {info.dtype} tensor of shape {info.shape}, want a 2-D BF16 weight")
        n = cache.stored_size(info.index)
        host = torch.empty(n, dtype=torch.uint8)
        cache.read_stored_into_ptr(info.index, host.data_ptr(), n)
        head = host[:64].numpy().tobytes()
        if head[:4] != FIXED_MAGIC:
            raise ValueError(f"{name} is not stored as a fixed payload (stored {'compressed' if info.compressed else 'raw'}): "
                             "compress it with the fixed codec")
        return cls(cache, host.to(torch.device("cuda", device)), head, info.shape[0], info.shape[1], bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype != torch.bfloat16 or x.shape[-1] != self.in_features:
            raise ValueError(f"input of {x.dtype} and last dimension {x.shape[-1]}, want BF16 and {self.in_features}")
        if x.device != self.payload.device:
            raise ValueError(f"input on {x.device}, the layer's weight on {self.payload.device}")
        lead = x.shape[:-1]
        x2 = x.reshape(-1, self.in_features).contiguous()
        if x2.data_ptr() % 16:
            x2 = x2.clone()
        y = _gemv_op()(self.payload, x2, self._layer, self.out_features).reshape(*lead, self.out_features)
        if self.bias is not None:
            y = y + self.bias
        return y

    def check(self) -> None:
        """Wait for the current stream and raise Error if a product on this
        layer's device found a payload bad since the last check (the
        report is the device's: any FixedLinear's on it)."""
        cache, _ = _layers[self._layer]
        dev = self.payload.device.index
        cache.gemv_check(dev, torch.cuda.current_stream(self.payload.device).cuda_stream)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}, "
                f"payload={self.payload.numel()} bytes ({8 * self.payload.numel() / (self.in_features * self.out_features):.2f} bits a weight)")

    def __del__(self):
        with _layers_lock:
            _layers.pop(getattr(self, "_layer", None), None)


def replace_linears(model: torch.nn.Module, cache: Cache, device: int = 0) -> List[str]:
    """Replace, in place, every torch.nn.Linear of model whose weight the
    cache stores as a fixed payload (by the weight's name in the model's
    state dict, as the checkpoint names it) with a FixedLinear on device,
    its bias kept; returns the names of the weights replaced. Linears the
    cache does not hold, holds raw or in another form, or whose shape the
    kernel does not take (in_features not a multiple of 16) stay as they
    are. The cache must stay open while the model runs."""
    done = []
    for name, mod in list(model.named_modules()):
        if not name or type(mod) is not torch.nn.Linear or mod.in_features % 16:
            continue  # the model itself is not replaced: the caller holds it
        weight = f"{name}.weight"
        try:
            info = cache.info(weight)
        except (KeyError, Error):
            continue
        if info.dtype != "BF16" or tuple(info.shape) != (mod.out_features, mod.in_features) or not info.compressed:
            continue
        bias = None if mod.bias is None else mod.bias.detach()
        try:
            fixed = FixedLinear.from_cache(cache, weight, device=device, bias=bias)
        except ValueError:
            continue  # stored in another form than a fixed payload
        parent, _, leaf = name.rpartition(".")
        setattr(model.get_submodule(parent), leaf, fixed)
        done.append(weight)
    return done


__all__ = ["FixedLinear", "MAX_BATCH", "Error", "replace_linears"]
