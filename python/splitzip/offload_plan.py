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

from typing import Dict, List, Optional, Tuple

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


class ExpertPlan:
    """Where the experts of mixture-of-experts layers are, for an offload
    that faults in only the experts a layer's router picks.

    Each of `rows` row sets (the fused expert tensors a layer computes
    with, [experts, ...]) has a row per expert; row e of set r holds
    expert e of some layer whose experts run in set r, or nothing. A pool
    of `buffers` GPU buffers holds packs of experts; every expert's pack
    stays in pinned host memory too. Before layer `layer`'s experts run,
    need() says for each routed expert what brings it into its row:
    nothing (the row holds it), a scatter from the pool buffer holding its
    pack, or a copy of its pack into a buffer and then that scatter.
    prefetch() copies predicted experts into the pool ahead of need.

    The pool is `ring` buffers taken in turn by whatever comes in, and the
    rest for the hot experts: those needed most often since the start. An
    expert that comes in takes a hot buffer when one is free or when it
    has been needed more often than the least needed hot expert (the
    oldest of those), else the next ring buffer. Layers run in a cycle
    longer than the pool, where keeping the most recently used would keep
    none. A prefetched expert not yet needed is not evicted from a hot
    buffer, and the ring skips it while it can. Every action is enqueued in order on one stream, so a buffer
    reused within one call is never read after it is overwritten."""

    ROW, POOL, COPY = "row", "pool", "copy"

    def __init__(self, rows: int, experts: int, buffers: int, ring: Optional[int] = None):
        if ring is None:
            ring = max(1, buffers // 4)
        if rows < 1 or experts < 1 or buffers < 1 or not 1 <= ring <= buffers:
            raise ValueError(f"rows {rows}, experts {experts}, buffers {buffers}, ring {ring}: "
                             "want each >= 1 and ring <= buffers")
        self.experts = experts
        self.rows = [[-1] * experts for _ in range(rows)]
        self.hot: Dict[Tuple[int, int], int] = {}  # (layer, expert) -> buffer, oldest first
        self.free = list(range(buffers - 1, ring - 1, -1))  # hot buffers not yet used
        self.ring: List[Optional[Tuple[int, int]]] = [None] * ring  # ring buffer k (= k) holds
        self.next = 0
        self.uses: Dict[Tuple[int, int], int] = {}  # (layer, expert) -> times needed
        self.prefetched = set()  # (layer, expert) copied by prefetch() and not needed since
        self.row_hits = self.pool_hits = self.copies = self.prefetches = self.prefetch_hits = 0

    def where(self, key: Tuple[int, int]) -> int:
        """The buffer holding key's pack, or -1."""
        if key in self.hot:
            return self.hot[key]
        try:
            return self.ring.index(key)
        except ValueError:
            return -1

    def _buffer(self, key: Tuple[int, int]) -> int:
        """A buffer for key's pack (in none now)."""
        if self.free:
            self.hot[key] = k = self.free.pop()
            return k
        n = self.uses.get(key, 0)
        settled = [x for x in self.hot if x not in self.prefetched]
        if settled:
            old = min(settled, key=lambda x: self.uses.get(x, 0))  # min keeps the first, the oldest
            if n > self.uses.get(old, 0):
                k = self.hot.pop(old)
                self.prefetched.discard(old)
                self.hot[key] = k
                return k
        for step in range(len(self.ring)):
            k = (self.next + step) % len(self.ring)
            if self.ring[k] not in self.prefetched or step == len(self.ring) - 1:
                break
        self.prefetched.discard(self.ring[k])
        self.ring[k], self.next = key, (k + 1) % len(self.ring)
        return k

    def need(self, layer: int, row_set: int, experts: List[int]) -> List[Tuple[int, str, int]]:
        """Layer `layer` (its experts in row set row_set) is about to run
        experts (distinct indices). Returns (expert, action, buffer) for
        each, in order: ROW (buffer -1), POOL or COPY."""
        out = []
        row = self.rows[row_set]
        for e in experts:
            if not 0 <= e < self.experts:
                raise ValueError(f"expert {e} of {self.experts}")
            key = (layer, e)
            self.uses[key] = self.uses.get(key, 0) + 1
            k = self.where(key)
            if key in self.prefetched:
                self.prefetched.discard(key)
                if k >= 0:
                    self.prefetch_hits += 1
            if row[e] == layer:
                self.row_hits += 1
                out.append((e, self.ROW, -1))
                continue
            if k >= 0:
                self.pool_hits += 1
                out.append((e, self.POOL, k))
            else:
                self.copies += 1
                out.append((e, self.COPY, self._buffer(key)))
            row[e] = layer
        return out

    def prefetch(self, layer: int, row_set: int, experts: List[int]) -> List[Tuple[int, int]]:
        """Layer `layer` will likely run experts: (expert, buffer) for
        each whose pack to copy into the pool now (not in its row, not
        in the pool)."""
        out = []
        for e in experts:
            key = (layer, e)
            if not 0 <= e < self.experts or self.rows[row_set][e] == layer or self.where(key) >= 0:
                continue
            self.prefetches += 1
            k = self._buffer(key)
            self.prefetched.add(key)
            out.append((e, k))
        return out

    def forget(self) -> None:
        """A forward failed: rows and buffers may hold anything."""
        for row in self.rows:
            row[:] = [-1] * self.experts
        self.free = sorted(set(self.free) | set(self.hot.values()), reverse=True)
        self.hot.clear()
        self.ring = [None] * len(self.ring)
        self.next = 0
        self.prefetched.clear()

    def held(self) -> int:
        """Experts in the pool."""
        return len(self.hot) + sum(1 for x in self.ring if x is not None)


def hot_pool(uses: Dict[Tuple[int, int], int], buffers: int,
             held: Dict[Tuple[int, int], int]) -> Dict[Tuple[int, int], int]:
    """Which (layer, expert) each of `buffers` pool buffers should hold:
    the most used experts (uses: times routed; ties to the lower key),
    never one not used yet. An expert that held already (held: key ->
    buffer) keeps its buffer, so a new assignment moves only the experts
    that come in. Returns key -> buffer."""
    if buffers < 0:
        raise ValueError(f"buffers {buffers}: want >= 0")
    ranked = sorted((k for k, c in uses.items() if c > 0), key=lambda k: (-uses[k], k))[:buffers]
    out = {k: held[k] for k in ranked if k in held and 0 <= held[k] < buffers}
    free = sorted(set(range(buffers)) - set(out.values()), reverse=True)
    for k in ranked:
        if k not in out:
            out[k] = free.pop()
    return out
