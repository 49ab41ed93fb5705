"""Which decoder layer is in which slot of an offload window, and when
uploads start: the plan splitzip.offload runs, without torch, so that it
is tested anywhere (python/tests/test_offload_plan.py).

Layer i runs in slot i mod window. Before layer i runs it must be in its
slot: if the slot holds it and no upload of it is outstanding, that is a
hit; else its upload is started now (unless one is outstanding) and
waited for. Then the uploads of the next `prefetch` layers are started,
each into its slot, unless the slot holds it already. At the forward's
end the first `prefetch` layers are started for the next forward. With
prefetch < window, a started upload only ever replaces a layer that has
already run in this forward (or, at the end, in the last one).
"""

from typing import List, Optional, Tuple

TIERS = ("cache", "pinned", "gpu")


def tiers(sizes: List[int], tier: str, gpu_bytes: Optional[int] = None) -> List[str]:
    """The tier of each layer, whose packs are sizes[i] bytes: every
    layer in tier "cache" or "pinned"; for "gpu", layers in order while
    their packs fit in gpu_bytes (None: all of them), the others pinned.
    A layer that does not fit does not stop later, smaller ones."""
    if tier not in TIERS:
        raise ValueError(f"tier {tier!r}: want one of {', '.join(TIERS)}")
    if gpu_bytes is not None and gpu_bytes < 0:
        raise ValueError(f"gpu_bytes {gpu_bytes}: want a byte count >= 0")
    if tier != "gpu":
        return [tier] * len(sizes)
    budget = sum(sizes) if gpu_bytes is None else gpu_bytes
    out = []
    for n in sizes:
        if n <= budget:
            budget -= n
            out.append("gpu")
        else:
            out.append("pinned")
    return out


class Plan:
    """The slot plan of `layers` decoder layers in `window` slots, with
    `prefetch` layers uploaded ahead (0 <= prefetch < window)."""

    def __init__(self, layers: int, window: int, prefetch: int):
        if layers < 1 or window < 1 or prefetch < 0 or prefetch >= window:
            raise ValueError(f"window {window}, prefetch {prefetch} for {layers} layers: "
                             "want window >= 1 and 0 <= prefetch < window")
        self.layers, self.window, self.prefetch = layers, window, prefetch
        self.held = [-1] * window   # the layer each slot holds or receives
        self.outstanding = set()    # layers started and not yet waited for
        self.uploads = 0
        self.hits = 0

    def slot(self, i: int) -> int:
        """The slot layer i runs in."""
        return i % self.window

    def _claim(self, i: int) -> bool:
        if i >= self.layers or self.held[i % self.window] == i:
            return False
        self.held[i % self.window] = i
        self.outstanding.add(i)
        self.uploads += 1
        return True

    def before(self, i: int) -> Tuple[bool, List[int]]:
        """Layer i is about to run. Returns whether the caller must wait
        for layer i's upload, and the layers whose uploads to start now, in
        order (i first when it is not in its slot)."""
        if not 0 <= i < self.layers:
            raise ValueError(f"layer {i} of {self.layers}")
        if self.held[i % self.window] == i and i not in self.outstanding:
            self.hits += 1
        starts = [i] if self._claim(i) else []
        wait = i in self.outstanding
        self.outstanding.discard(i)
        starts += [j for j in range(i + 1, i + 1 + self.prefetch) if self._claim(j)]
        return wait, starts

    def end(self) -> List[int]:
        """The forward ended: the layers whose uploads to start for the
        next one."""
        return [j for j in range(min(self.prefetch, self.layers)) if self._claim(j)]
