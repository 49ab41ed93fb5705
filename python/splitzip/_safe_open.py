"""safetensors' safe_open over a splitzip cache, for code written against
safetensors:

    from splitzip import safe_open
    with safe_open("llama.sz", framework="pt", device="cpu") as f:
        meta = f.metadata()                      # the first shard's __metadata__
        for name in f.keys():                    # sorted, as safetensors gives them
            t = f.get_tensor(name)               # bit for bit
        rows = f.get_slice("lm_head.weight")[0:1024]   # a range of rows

A cache holds a whole checkpoint (every shard), so keys() lists every
shard's tensors and metadata() is the first shard's (shard_metadata() has
each one's). framework "pt" (or "torch") gives torch tensors, "np" (or
"numpy") numpy arrays as splitzip.numpy does (BF16 as uint16 bits).
get_slice's first index of a range of the first dimension (an int or a
slice of step 1, the other dimensions whole) reads the tensor's stored
bytes (a payload, or a raw tensor's bytes), which the slice keeps for its
later indexes, and decodes only the payload chunks that hold the range;
any other index decodes the tensor and indexes it.
"""

import operator
from typing import Dict, List, Optional, Tuple

from ._lib import Cache, TensorInfo, error

_FRAMEWORKS = {"pt": "pt", "torch": "pt", "pytorch": "pt", "np": "np", "numpy": "np"}


class safe_open:
    """A cache opened as safetensors.safe_open opens a file (a context
    manager); source picks a checkpoint of a cache that holds several, or
    where a moved one is now (as Cache's)."""

    def __init__(self, filename, framework: str = "pt", device="cpu", source: Optional[str] = None):
        if not isinstance(framework, str) or framework.lower() not in _FRAMEWORKS:
            raise error(1, f"framework={framework!r}: splitzip.safe_open gives \"pt\" (torch) or \"np\" (numpy) "
                           "tensors")
        self._fw = _FRAMEWORKS[framework.lower()]
        if self._fw == "np":
            from . import numpy as _np
            if device not in ("cpu", None):
                raise error(1, f"device={device!r}: numpy arrays are in host memory (device=\"cpu\")")
            self._mod, self._device = _np, None
        else:
            from . import torch as _torch
            self._mod, self._device = _torch, _torch._device(device)
        self._cache = Cache(filename, source)
        self._meta = None

    def __enter__(self) -> "safe_open":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self._cache.close()

    def keys(self) -> List[str]:
        """Every tensor's name, sorted (safetensors' order)."""
        return sorted(self._cache.names())

    def offset_keys(self) -> List[str]:
        """Every tensor's name in the checkpoint's order: shard by shard,
        each in the order of its bytes."""
        return [t.name for t in self._cache.infos()]

    def metadata(self) -> Optional[Dict[str, str]]:
        """The first shard's __metadata__ (None where its header has
        none), what safetensors gives for that file."""
        shards = self.shard_metadata()
        return shards[0][1] if shards else None

    def shard_metadata(self) -> List[Tuple[str, Optional[Dict[str, str]]]]:
        """Each shard's file name and __metadata__, in the checkpoint's
        order (Cache.shard_metadata)."""
        if self._meta is None:
            self._meta = self._cache.shard_metadata()
        return self._meta

    def get_tensor(self, name: str):
        """The tensor called name, bit for bit; NotFoundError (a KeyError)
        when there is none."""
        if self._fw == "np":
            return self._mod.get_tensor(self._cache, name)
        return self._mod.get_tensor(self._cache, name, device=self._device)

    def get_slice(self, name: str) -> "Slice":
        """The tensor called name, to index (f.get_slice(name)[a:b]) or to
        ask its shape and dtype without reading it."""
        return Slice(self, self._cache.info(name))


class Slice:
    """One tensor of a safe_open, read when indexed."""

    def __init__(self, f: safe_open, info: TensorInfo):
        self._f, self._info = f, info
        self._stored = None  # (buffer, size) once a range was read

    def get_shape(self) -> List[int]:
        return list(self._info.shape)

    def get_dtype(self) -> str:
        """The safetensors dtype ("BF16", "F32", ...)."""
        return self._info.dtype

    def __len__(self) -> int:
        if not self._info.shape:
            raise TypeError(f"len() of {self._info.name!r}, a tensor of no dimensions")
        return self._info.shape[0]

    def __getitem__(self, index):
        rows = self._rows(index)
        if rows is None:
            t = self._f.get_tensor(self._info.name)
            return t if index is Ellipsis or index == () else t[index]
        r0, r1, squeeze = rows
        t = self._part(r0, r1)
        return t[0] if squeeze else t

    def _rows(self, index) -> Optional[Tuple[int, int, bool]]:
        """The rows [r0, r1) of the first dimension an index takes whole
        rows of, and whether it drops that dimension (an int); None for
        any other index (or none)."""
        shape = self._info.shape
        idx = index if isinstance(index, tuple) else (index,)
        if not shape or not idx or self._f._fw == "np" and self._info.dtype not in self._f._mod.DTYPES:
            return None  # (numpy gives a dtype it lacks as flat bytes)
        first, rest = idx[0], idx[1:]
        whole = [r is Ellipsis or isinstance(r, slice) and r == slice(None) for r in rest]
        dims = sum(r is not Ellipsis for r in idx)
        if not all(whole) or sum(r is Ellipsis for r in idx) > 1 or dims > len(shape):
            return None  # torch or numpy indexes the whole tensor (or says why not)
        n = shape[0]
        if isinstance(first, slice):
            if first.step not in (None, 1) or first == slice(None):
                return None
            r0, r1, _ = first.indices(n)
            return r0, max(r0, r1), False
        if isinstance(first, bool):
            return None
        try:
            i = operator.index(first)
        except TypeError:
            return None
        if i < -n or i >= n:
            raise IndexError(f"index {i} is out of bounds for dimension 0 of {self._info.name!r} (size {n})")
        i %= n
        return i, i + 1, True

    def _part(self, r0: int, r1: int):
        """Rows [r0, r1) of the tensor, decoded from the part of its stored
        bytes that holds them."""
        info, c = self._info, self._f._cache
        shape = (r1 - r0,) + tuple(info.shape[1:])
        row = info.nbytes // info.shape[0] if info.shape[0] else 0
        lo, hi = r0 * row, r1 * row
        out = self._empty(shape)
        if hi > lo:
            import ctypes
            if self._stored is None:
                stored = c.stored_size(info.index)
                src = (ctypes.c_uint8 * max(stored, 1))()
                self._stored = src, c.read_stored_into_ptr(info.index, ctypes.addressof(src), stored)
            src, n = self._stored
            cap = Cache.part_bound(n, info.nbytes)
            part = (ctypes.c_uint8 * cap)()
            m = c.part_into_ptr(info.index, ctypes.addressof(src), n, lo, hi, ctypes.addressof(part), cap)
            c.decode_part_ptr(info.index, ctypes.addressof(part), m, lo, hi, self._ptr(out), hi - lo)
        if self._f._fw == "pt" and self._f._device.type != "cpu":
            out = out.to(self._f._device)
        return out

    def _empty(self, shape):
        """A host tensor or array of the tensor's dtype and shape."""
        info = self._info
        if self._f._fw == "np":
            import numpy as np
            return np.empty(shape, dtype=self._f._mod.DTYPES[info.dtype])
        import torch
        return torch.empty(shape, dtype=self._f._mod.torch_dtype(info.name, info.dtype))

    def _ptr(self, out) -> int:
        return out.ctypes.data if self._f._fw == "np" else out.data_ptr()

    def __repr__(self) -> str:
        return f"splitzip.Slice({self._info.name!r}, {self._info.dtype}, {tuple(self._info.shape)})"
