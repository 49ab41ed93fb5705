"""The offload window plan (splitzip.offload_plan), without torch: run in
CI. Sequential forwards are simulated for many layer counts, windows and
prefetch depths, checking that every layer is in its slot when it runs
and the upload and hit counts: a layer alone in its slot is uploaded once,
the others once a forward (and the first `prefetch` once more, at the
last forward's end), so no upload replaces a layer before it has run."""

import unittest

import testenv  # noqa: F401  (python/tests; before splitzip)
from splitzip.offload_plan import Plan, tiers


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


if __name__ == "__main__":
    unittest.main()
