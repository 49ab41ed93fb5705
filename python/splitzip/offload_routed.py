"""Expert-granular offload with routing decided on the device:
splitzip.offload with experts= and expert_routing="device".

The host-routed offload (splitzip.offload_experts) reads each layer's
routed experts back to the host, so a forward cannot be captured in a
CUDA graph and waits for the device once per mixture-of-experts layer.
Here the decision is device work with fixed arguments, enqueued on the
forward's own stream:

- a mask of the experts the router picked (index_fill of the routed
  indices the experts module is called with);
- against a device table of what each row of the layer's row set holds
  (the layer whose expert it is, or -1), the experts to write: routed and
  not held; the table is updated at once;
- one launch of the routed scatter kernel (Cache.scatter_routed) over the
  layer's candidate packs, which writes the wanted ones into their rows.

A candidate's pack is read where the device table of the layer's packs
says it is: a GPU buffer of the pool of hot experts, or the expert's pack
in pinned host memory, which the kernel reads over the bus (no copy
first, so no host decision). The pool holds the experts routed most often
so far: rebalance() reads the device's tallies, copies the packs of the
new hot set into the pool buffers and points the table at them. It runs
after forwards 1, 2, 4, 8, ... (every 256 at most) of eager use, and
when called, such as between replays of a captured graph: a graph reads
the tables at each replay, so it follows the new pool without capturing
again.

The rows a forward computes with then hold the same bytes as with the
host routing, and the experts module's forward runs unchanged, so logits
equal the resident model's in eager mode, and a graph replay equals the
resident model's graph replay.
"""

import time
from typing import Dict, List, Tuple

import torch

from .offload_experts import Experts, _tensor_args
from .offload_plan import hot_pool

#: uint64 words of one candidate of the routed scatter's table: base,
#: staged, count, units (gpu.RoutedPackBytes / 8).
CANDIDATE_WORDS = 4


class DeviceExperts(Experts):
    """Experts with the routing decided on the device (module doc)."""

    REBALANCE_MAX = 256  # forwards between automatic rebalances, at most

    capturable = True
    entropy = False  # the routed scatter kernel decodes fixed-rate payloads only

    def __init__(self, o, mods, units, found, budget, prefetch):
        super().__init__(o, mods, units, found, budget, 0)  # no prediction: offload checked prefetch == 0
        dev, n = o.device, self.experts
        self.slot_of = {m: k for k, m in enumerate(self.moe)}  # layer -> its index among expert layers
        table = torch.zeros((len(self.moe), n, CANDIDATE_WORDS), dtype=torch.int64)
        for (i, e), (held, off, info) in self.packs.items():
            assert info.entropy_count == 0, "the routed scatter decodes fixed-rate payloads only"
            table[self.slot_of[i], e] = torch.tensor([held.data_ptr() + off, info.staged, info.count, info.units])
        self.table = table.to(dev)
        self.want = torch.zeros((len(self.moe), n), dtype=torch.uint8, device=dev)
        self.rows_held = torch.full((o.expert_window, n), -1, dtype=torch.int32, device=dev)
        # tally[0]: times routed, tally[1]: times written into a row, per
        # (expert layer, expert), counted on the device.
        self.tally = torch.zeros((2, len(self.moe), n), dtype=torch.int64, device=dev)
        self.seen = torch.zeros((2, len(self.moe), n), dtype=torch.int64)  # tally at the last read
        self.in_pool: Dict[Tuple[int, int], int] = {}  # (layer, expert) -> pool buffer
        self.pooled = torch.zeros((len(self.moe), n), dtype=torch.bool)
        self.staged = torch.zeros((len(self.moe), n), dtype=torch.int64)
        self.raw = torch.zeros((len(self.moe), n), dtype=torch.int64)
        for (i, e), (_, _, info) in self.packs.items():
            self.staged[self.slot_of[i], e] = info.staged
            self.raw[self.slot_of[i], e] = sum(pc[3] for pc in self.units[(i, e)])
        self.forwards, self.next_rebalance = 0, 1

    def _pre(self, i: int):
        n = self.mods[i][2]

        def hook(module, args, kwargs):
            t0 = time.perf_counter()
            o, k = self.o, self.slot_of[i]
            routed = None
            for a in _tensor_args(args, kwargs):
                if not a.is_floating_point() and a.dtype != torch.bool:
                    routed = a
                    break
            if routed is None:
                raise RuntimeError(f"splitzip.offload: the experts of layer {i} were called without expert indices")
            mask = torch.zeros(n + 1, dtype=torch.bool, device=routed.device)
            mask.index_fill_(0, routed.reshape(-1).long().clamp(0, n), True)
            held = self.rows_held[self._rows(i), :n]
            go = mask[:n] & (held != i)
            self.want[k, :n].copy_(go)
            held.masked_fill_(go, i)
            self.tally[0, k, :n] += mask[:n]
            self.tally[1, k, :n] += go
            stream = torch.cuda.current_stream(o.device).cuda_stream
            o.cache.scatter_routed(o.dev, self.table[k].data_ptr(), self.want[k].data_ptr(), n,
                                   min(n, routed.numel()), stream)
            o.stats.hooks_s += time.perf_counter() - t0
            return None
        return hook

    def read_tally(self) -> List[Tuple[int, int]]:
        """Add what the device counted since the last read to the stats
        (waits for the device); returns the (layer, expert)s written
        into rows since then."""
        now = self.tally.cpu()
        d, self.seen = now - self.seen, now
        st = self.stats
        routed, written = d[0], d[1]
        st.routed += int(routed.sum())
        st.row_hits += int(routed.sum() - written.sum())
        st.pool_hits += int(written[self.pooled].sum())
        st.copies += int(written[~self.pooled].sum())
        st.copied_bytes += int((written * self.staged)[~self.pooled].sum())
        st.scattered_bytes += int((written * self.raw).sum())
        return [(self.moe[k], e) for k, e in written.nonzero().tolist()]

    def rebalance(self) -> None:
        """Fill the pool with the packs of the experts routed most often
        so far, and point the device table at them (waits for the
        device). The graph of a captured forward follows at its next
        replay."""
        torch.cuda.synchronize(self.o.device)
        self.read_tally()
        uses = self.seen[0]
        keep = hot_pool({(i, e): int(uses[self.slot_of[i], e]) for (i, e) in self.packs}, len(self.pool),
                        self.in_pool)
        for key, b in keep.items():
            if self.in_pool.get(key) != b:
                held, off, info = self.packs[key]
                self.pool[b][:info.staged].copy_(held[off:off + info.staged])
                self.stats.copied_bytes += info.staged
        self.in_pool = keep
        table = self.table.cpu()
        self.pooled.zero_()
        for (i, e), (held, off, _) in self.packs.items():
            b = keep.get((i, e))
            k = self.slot_of[i]
            table[k, e, 0] = held.data_ptr() + off if b is None else self.pool[b].data_ptr()
            self.pooled[k, e] = b is not None
        self.table.copy_(table)
        torch.cuda.synchronize(self.o.device)

    def check(self, stream: int) -> None:
        """Wait for stream, the forwards' (where this routing scatters),
        and raise what the kernel found there."""
        self.o.cache.scatter_check(self.o.dev, stream)

    def finish(self, eager: bool = True) -> None:
        """After a check found no error: count what the device did, and
        after an eager forward rebalance the pool when its turn has come."""
        if not eager:
            self.read_tally()
            return
        self.forwards += 1
        if self.forwards >= self.next_rebalance:
            self.rebalance()
            self.next_rebalance = self.forwards + min(self.forwards, self.REBALANCE_MAX)
        else:
            self.read_tally()

    def repair(self) -> List[str]:
        """After the kernel reported an error: every row is marked empty
        (a failed write left it unknown); the packs of experts written
        since the last check that differ from a fresh pack are rebuilt,
        in pinned memory and in the pool; returns their tensors."""
        torch.cuda.synchronize(self.o.device)
        self.rows_held.fill_(-1)
        self.faulted = self.read_tally()
        names = super().repair()
        for key, b in self.in_pool.items():
            held, off, info = self.packs[key]
            self.pool[b][:info.staged].copy_(held[off:off + info.staged])
        torch.cuda.synchronize(self.o.device)
        return names

    def forget(self) -> None:
        torch.cuda.synchronize(self.o.device)
        self.rows_held.fill_(-1)
        self.read_tally()
        self.faulted = []
