"""Where a model parameter's bytes come from: the checkpoint tensors whose
bytes, laid end to end, are the parameter's bytes.

transformers builds some parameters from several checkpoint tensors (a
mixture-of-experts layer's experts stacked and concatenated into one
fused tensor, say) and renames others. splitzip does not keep a table of
those conversions: transformers runs them on the tensors splitzip gives
it, and this module finds, by content, which checkpoint tensor fills
which byte range of each parameter. Every range is checked byte for byte,
so a layout found here reproduces the parameter exactly; a parameter that
is no such layout (a transpose, a dtype cast) has none.

Pure torch on the CPU: splitzip.offload uses it to fault each parameter
in from the cache tensors behind it, one expert slice at a time if need
be; python/tests/test_pieces.py checks it without a GPU.
"""

import hashlib
from typing import Dict, List, Optional, Tuple

import torch

PREFIX = 16  # bytes of a tensor's fingerprint


def as_bytes(t: "torch.Tensor") -> "torch.Tensor":
    """t's bytes as a flat uint8 tensor (a view where t is contiguous)."""
    t = t.detach().contiguous().reshape(-1)
    if t.dtype == torch.uint8:
        return t
    if t.dtype == torch.bool:
        return t.view(torch.uint8)
    return t.view(torch.uint8) if t.numel() else torch.empty(0, dtype=torch.uint8)


def _digest(b: "torch.Tensor") -> bytes:
    return hashlib.blake2b(b.numpy(), digest_size=16).digest()


class Index:
    """Checkpoint tensors (name -> CPU tensor) by their first bytes and
    length (and, where several share both, by a digest of their bytes),
    for pieces()."""

    def __init__(self, sources: Dict[str, "torch.Tensor"]):
        self.bytes: Dict[str, "torch.Tensor"] = {}
        # first min(PREFIX, n) bytes -> length -> names
        self.by: Dict[bytes, Dict[int, List[str]]] = {}
        self.digests: Dict[Tuple[bytes, int], Dict[bytes, str]] = {}
        self.short: List[int] = []  # lengths under PREFIX, longest first
        for name, t in sources.items():
            b = as_bytes(t)
            n = b.numel()
            if n == 0:
                continue
            self.bytes[name] = b
            self.by.setdefault(bytes(b[:PREFIX].numpy()), {}).setdefault(n, []).append(name)
        short = set()
        for key, lengths in self.by.items():
            for n in lengths:
                if n < PREFIX:
                    short.add(n)
        self.short = sorted(short, reverse=True)

    def _named(self, key: bytes, n: int, names: List[str], b: "torch.Tensor") -> Optional[str]:
        """The source of the names (all of key's first bytes and length n)
        equal to b."""
        if len(names) == 1:
            return names[0] if torch.equal(b, self.bytes[names[0]]) else None
        d = self.digests.get((key, n))
        if d is None:
            d = {}
            for name in names:
                d.setdefault(_digest(self.bytes[name]), name)
            self.digests[(key, n)] = d
        name = d.get(_digest(b))
        return name if name is not None and torch.equal(b, self.bytes[name]) else None

    def _at(self, b: "torch.Tensor", off: int) -> Optional[Tuple[str, int]]:
        """A source equal to b[off:off+len], the longest found, with its length."""
        left = b.numel() - off
        if left >= PREFIX:
            key = bytes(b[off:off + PREFIX].numpy())
            for n, names in sorted(self.by.get(key, {}).items(), reverse=True):
                if n <= left:
                    name = self._named(key, n, names, b[off:off + n])
                    if name is not None:
                        return name, n
        for n in self.short:
            if n <= left:
                key = bytes(b[off:off + n].numpy())
                names = self.by.get(key, {}).get(n)
                if names:
                    return names[0], n
        return None
    def pieces(self, target: "torch.Tensor") -> Optional[List[Tuple[int, str, int]]]:
        """(byte offset, source name, bytes) ranges that tile target's
        bytes exactly, each equal to its source's bytes; None when the
        sources do not tile it."""
        b = as_bytes(target.cpu())
        out, off = [], 0
        while off < b.numel():
            hit = self._at(b, off)
            if hit is None:
                return None
            out.append((off, hit[0], hit[1]))
            off += hit[1]
        return out
