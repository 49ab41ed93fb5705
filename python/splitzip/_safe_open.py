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
get_slice(name)[index] reads and decodes the whole tensor, then copies out
what the index takes, as torch (or numpy) indexes: a slice costs its
tensor's read, not only its part's, and keeps no more than the part.
"""

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
        """The tensor indexed as torch (or numpy) indexes it, in memory of
        its own: the whole tensor is read and decoded, the part copied
        out, and the rest let go."""
        t = self._f.get_tensor(self._info.name)
        part = t[index]
        # A view (basic indexing) keeps the whole tensor alive: copied, as
        # safetensors' slices are tensors of their own, unless it is all of
        # the tensor; advanced indexing and numpy's scalars copy already.
        if self._f._fw == "np":
            view = getattr(part, "base", None) is not None
        else:
            view = part._base is not None
        if view and not (part.shape == t.shape and self._contiguous(part)):
            return part.copy() if self._f._fw == "np" else part.clone()
        return part

    def _contiguous(self, a) -> bool:
        return a.flags["C_CONTIGUOUS"] if self._f._fw == "np" else a.is_contiguous()

    def __repr__(self) -> str:
        return f"splitzip.Slice({self._info.name!r}, {self._info.dtype}, {tuple(self._info.shape)})"
