"""The offload window plan (splitzip.offload_plan), without torch: run in
CI. Sequential forwards are simulated for many layer counts, windows and
prefetch depths, checking that every layer is in its slot when it runs
and the upload and hit counts: a layer alone in its slot is uploaded once,
the others once a forward (and the first `prefetch` once more, at the
last forward's end), so no upload replaces a layer before it has run."""

import unittest

import testenv  # noqa: F401  (python/tests; before splitzip)
import random

from splitzip.offload_plan import ExpertPlan, Plan, hot_pool, tiers


def simulate(layers, window, prefetch, forwards):
    p = Plan(layers, window, prefetch)
    slots = [-1] * window  # what each slot holds once its uploads land
    events = []
    for f in range(forwards):
        for i in range(layers):
            wait, starts = p.before(i)
            for j in starts:
                slots[p.slot(j)] = j
            assert slots[p.slot(i)] == i, ("layer not in its slot", f, i, slots)
            events.append((f, i, wait, tuple(starts)))
        for j in p.end():
            slots[p.slot(j)] = j
    return p, events


class TestTiers(unittest.TestCase):
    def test_gpu_budget(self):
        self.assertEqual(tiers([10, 10, 10], "gpu"), ["gpu"] * 3)
        self.assertEqual(tiers([10, 10, 10], "gpu", 25), ["gpu", "gpu", "pinned"])
        self.assertEqual(tiers([10, 30, 10], "gpu", 25), ["gpu", "pinned", "gpu"])
        self.assertEqual(tiers([10, 10], "gpu", 0), ["pinned", "pinned"])
        self.assertEqual(tiers([10, 10], "pinned", 100), ["pinned", "pinned"])
        self.assertEqual(tiers([10], "cache"), ["cache"])

    def test_bad(self):
        with self.assertRaisesRegex(ValueError, "tier"):
            tiers([1], "disk")
        with self.assertRaisesRegex(ValueError, "gpu_bytes"):
            tiers([1], "gpu", -1)


class TestPlan(unittest.TestCase):
    def test_every_shape(self):
        for layers in range(1, 13):
            for window in range(1, 8):
                for prefetch in range(window):
                    p, events = simulate(layers, window, prefetch, 3)
                    alone = [sum(1 for j in range(layers) if j % window == i % window) == 1 for i in range(layers)]
                    want = sum(1 if a else 3 for a in alone)
                    self.assertEqual(p.uploads, want + (0 if all(alone) else self._end_extra(layers, window, prefetch)),
                                     (layers, window, prefetch))
                    self.assertEqual(p.hits, sum(2 for a in alone if a), (layers, window, prefetch))

    @staticmethod
    def _end_extra(layers, window, prefetch):
        # The last forward's end starts layers 0..prefetch-1 once more
        # where their slots were taken by later layers.
        return sum(1 for j in range(min(prefetch, layers))
                   if sum(1 for k in range(layers) if k % window == j % window) > 1)

    def test_prefetch_runs_ahead(self):
        p = Plan(16, 4, 2)
        wait, starts = p.before(0)
        self.assertEqual((wait, starts), (True, [0, 1, 2]))
        wait, starts = p.before(1)
        self.assertEqual((wait, starts), (True, [3]))
        wait, starts = p.before(2)
        self.assertEqual((wait, starts), (True, [4]))  # 4 replaces 0, which has run

    def test_bad_arguments(self):
        for args in ((4, 2, 2), (4, 0, 0), (0, 2, 1), (4, 2, -1)):
            with self.assertRaises(ValueError, msg=str(args)):
                Plan(*args)
        with self.assertRaises(ValueError):
            Plan(4, 2, 1).before(4)


def run_experts(layers, window, experts, buffers, topk, tokens, seed, predict=0.0):
    """Simulate decoding: each token routes topk random experts per layer
    (with probability predict the next layer's are foretold). A model of
    the rows and buffers follows the actions in order and must hold each
    needed expert in its row when the layer runs."""
    rng = random.Random(seed)
    p = ExpertPlan(window, experts, buffers)
    rows = [[None] * experts for _ in range(window)]
    bufs = [None] * buffers
    routes = [[sorted(rng.sample(range(experts), topk)) for _ in range(layers)] for _ in range(tokens)]
    for t in range(tokens):
        for i in range(layers):
            s = i % window
            for e, what, k in p.need(i, s, routes[t][i]):
                if what == p.COPY:
                    bufs[k] = (i, e)
                if what in (p.COPY, p.POOL):
                    assert bufs[k] == (i, e), ("buffer lost its pack", t, i, e, k, bufs[k])
                    rows[s][e] = (i, e)
                assert rows[s][e] == (i, e), ("expert not in its row", t, i, e)
            assert p.held() <= buffers
            nxt = (i + 1) % layers
            if predict and rng.random() < predict:
                fut = routes[t + (i + 1) // layers][nxt] if t + (i + 1) // layers < tokens else []
                for e, k in p.prefetch(nxt, nxt % window, fut):
                    bufs[k] = (nxt, e)
    return p


class TestExpertPlan(unittest.TestCase):
    def test_every_needed_expert_lands(self):
        for layers, window, experts, buffers, topk in ((4, 2, 8, 3, 2), (6, 3, 4, 1, 4), (3, 3, 8, 24, 2),
                                                       (5, 1, 16, 4, 8), (8, 2, 8, 16, 2)):
            for predict in (0.0, 0.5, 1.0):
                p = run_experts(layers, window, experts, buffers, topk, 20, 7, predict)
                total = layers * 20 * topk
                self.assertEqual(p.row_hits + p.pool_hits + p.copies, total)
                self.assertLessEqual(p.prefetch_hits, p.prefetches)
                self.assertLessEqual(p.prefetch_hits, p.pool_hits)

    def test_everything_fits(self):
        # A pool with a buffer per expert of every layer: each expert is
        # copied once; rows of a layer alone in its slot hit after that.
        p = run_experts(4, 4, 8, 32, 2, 50, 3)
        self.assertLessEqual(p.copies, 32)
        self.assertEqual(p.pool_hits + p.copies + p.row_hits, 4 * 50 * 2)
        self.assertGreater(p.row_hits, 0)

    def test_prefetch_turns_copies_into_hits(self):
        none = run_experts(8, 2, 8, 4, 2, 30, 5)
        all_ = run_experts(8, 2, 8, 4, 2, 30, 5, predict=1.0)
        self.assertEqual(none.prefetch_hits, 0)
        self.assertGreater(all_.prefetch_hits, 0)
        self.assertLess(all_.copies, none.copies)

    def test_cycle_longer_than_pool(self):
        # Ten layers' expert 0, in turn, through 8 buffers: keeping the
        # most recently used would keep none; keeping the most used keeps
        # seven of them after the first round.
        p = ExpertPlan(1, 1, 8, ring=1)
        for _ in range(20):
            for layer in range(10):
                p.need(layer, 0, [0])
        self.assertEqual(p.row_hits, 0)
        self.assertGreaterEqual(p.pool_hits, 7 * 19)

    def test_order_and_actions(self):
        p = ExpertPlan(2, 4, 3, ring=1)  # hot buffers 1 and 2, ring buffer 0
        self.assertEqual(p.need(0, 0, [1, 3]), [(1, p.COPY, 1), (3, p.COPY, 2)])
        self.assertEqual(p.need(0, 0, [1]), [(1, p.ROW, -1)])
        # Used once, like (0, 3), the least needed hot one: the ring.
        self.assertEqual(p.need(2, 0, [1]), [(1, p.COPY, 0)])
        self.assertEqual(p.need(2, 0, [1]), [(1, p.ROW, -1)])
        self.assertEqual(p.need(1, 1, [1]), [(1, p.COPY, 0)])
        # Row 1 of set 0 holds layer 2's; (0, 1) is hot.
        self.assertEqual(p.need(0, 0, [3, 1]), [(3, p.ROW, -1), (1, p.POOL, 1)])
        # Needed twice now, more than (0, 3): takes its hot buffer.
        self.assertEqual(p.need(2, 1, [1]), [(1, p.COPY, 2)])
        self.assertEqual(p.prefetch(1, 1, [2, 2]), [(2, 0)])
        self.assertEqual(p.need(1, 1, [2]), [(2, p.POOL, 0)])
        self.assertEqual((p.prefetches, p.prefetch_hits), (1, 1))
        p.forget()
        self.assertEqual(p.need(0, 0, [1]), [(1, p.COPY, 1)])
        with self.assertRaises(ValueError):
            p.need(0, 0, [4])
        for args in ((1, 4, 0), (1, 4, 2, 3), (1, 4, 2, 0)):
            with self.assertRaises(ValueError, msg=str(args)):
                ExpertPlan(*args)

    def test_pending_prefetch_kept(self):
        p = ExpertPlan(1, 4, 2, ring=2)  # all ring
        self.assertEqual(p.prefetch(1, 0, [1]), [(1, 0)])
        self.assertEqual(p.need(0, 0, [0]), [(0, p.COPY, 1)])
        # The next ring buffer (0) holds a prefetch not yet needed: skipped.
        self.assertEqual(p.need(2, 0, [3]), [(3, p.COPY, 1)])
        self.assertEqual(p.need(1, 0, [1]), [(1, p.POOL, 0)])

    def test_pending_prefetch_stays_hot(self):
        p = ExpertPlan(1, 4, 2, ring=1)  # hot buffer 1, ring buffer 0
        self.assertEqual(p.prefetch(1, 0, [1]), [(1, 1)])  # a free hot buffer
        # Layers 0 and 2 take turns with expert 0 (the same row): needed
        # more often than (1, 1), which was never needed yet, but that
        # one is pending, so they go through the ring.
        for layer in (0, 2, 0, 2):
            self.assertEqual(p.need(layer, 0, [0]), [(0, p.COPY, 0)])
        self.assertEqual(p.need(1, 0, [1]), [(1, p.POOL, 1)])
        self.assertEqual(p.prefetch_hits, 1)
        # Settled now, and needed less than (0, 0): (0, 0) takes it.
        self.assertEqual(p.need(0, 0, [0]), [(0, p.COPY, 1)])


class TestHotPool(unittest.TestCase):
    """The pool assignment of device-routed experts (rebalance)."""

    def test_most_used_kept_in_place(self):
        uses = {(0, 0): 5, (0, 1): 1, (1, 3): 9, (2, 2): 0, (1, 1): 5}
        got = hot_pool(uses, 3, {})
        self.assertEqual(set(got), {(1, 3), (0, 0), (1, 1)})  # 9, then the ties at 5
        self.assertEqual(sorted(got.values()), [0, 1, 2])
        # (0, 1) overtakes (1, 1): only the buffer of the one that leaves changes hands.
        uses[(0, 1)] = 7
        again = hot_pool(uses, 3, got)
        self.assertEqual(set(again), {(1, 3), (0, 1), (0, 0)})
        for k in ((1, 3), (0, 0)):
            self.assertEqual(again[k], got[k])
        self.assertEqual(again[(0, 1)], got[(1, 1)])

    def test_unused_never_pooled(self):
        self.assertEqual(hot_pool({(0, 0): 0, (0, 1): 0}, 4, {}), {})
        self.assertEqual(hot_pool({(0, 0): 2}, 0, {}), {})
        with self.assertRaises(ValueError):
            hot_pool({}, -1, {})

    def test_random_assignments_are_valid(self):
        rng = random.Random(5)
        held = {}
        for _ in range(300):
            n = rng.randrange(0, 6)
            uses = {(rng.randrange(4), rng.randrange(8)): rng.randrange(0, 20) for _ in range(rng.randrange(0, 30))}
            got = hot_pool(uses, n, held)
            self.assertEqual(len(set(got.values())), len(got))
            self.assertTrue(all(0 <= b < n for b in got.values()))
            want = sorted((k for k, c in uses.items() if c > 0), key=lambda k: (-uses[k], k))[:n]
            self.assertEqual(set(got), set(want))
            for k, b in got.items():
                if k in held and held[k] < n:
                    self.assertEqual(b, held[k], (k, held, got))
            held = got


if __name__ == "__main__":
    unittest.main()
