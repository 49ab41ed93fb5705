"""splitzip._pieces: the checkpoint tensors that tile a parameter's bytes,
on layouts like those transformers' conversions make (expert stacks and
concatenations, renames, fused projections), and none for layouts that
are no such tiling. CPU only."""

import unittest

import testenv  # noqa: F401,E402  (python/tests; before splitzip)
import torch

from splitzip._pieces import PREFIX, Index, as_bytes


def rebuilt(target, pieces, sources):
    """target's bytes put together from its pieces."""
    out = torch.empty(as_bytes(target).numel(), dtype=torch.uint8)
    for off, name, n in pieces:
        out[off:off + n] = as_bytes(sources[name])
    return out


class TestPieces(unittest.TestCase):
    def check(self, target, sources, count=None):
        got = Index(sources).pieces(target)
        self.assertIsNotNone(got, "no tiling found")
        self.assertTrue(torch.equal(rebuilt(target, got, sources), as_bytes(target)))
        if count is not None:
            self.assertEqual(len(got), count)
        return got

    def test_expert_fusion(self):
        """MergeModulelist then Concatenate(dim=1): gate_up_proj [E, 2I, H]
        from experts' w1 and w3, down_proj [E, H, I] from w2."""
        torch.manual_seed(0)
        E, I, H = 4, 24, 16
        src = {}
        for e in range(E):
            for w, shape in (("w1", (I, H)), ("w3", (I, H)), ("w2", (H, I))):
                src[f"layers.0.block_sparse_moe.experts.{e}.{w}.weight"] = torch.randn(shape).to(torch.bfloat16)
        gate = torch.stack([src[f"layers.0.block_sparse_moe.experts.{e}.w1.weight"] for e in range(E)])
        up = torch.stack([src[f"layers.0.block_sparse_moe.experts.{e}.w3.weight"] for e in range(E)])
        gate_up = torch.cat([gate, up], dim=1)  # [E, 2I, H]: expert e's w1 then w3, back to back
        down = torch.stack([src[f"layers.0.block_sparse_moe.experts.{e}.w2.weight"] for e in range(E)])
        got = self.check(gate_up, src, 2 * E)
        row = I * H * 2
        self.assertEqual([(o, n) for o, _, n in got], [(k * row, row) for k in range(2 * E)])
        self.assertEqual(got[1][1], "layers.0.block_sparse_moe.experts.0.w3.weight")
        self.check(down, src, E)

    def test_unequal_concatenation(self):
        """A fused qkv of unequal parts (grouped-query attention)."""
        torch.manual_seed(1)
        src = {"q": torch.randn(32, 8), "k": torch.randn(8, 8), "v": torch.randn(8, 8)}
        self.check(torch.cat([src["q"], src["k"], src["v"]]), src, 3)

    def test_renamed(self):
        torch.manual_seed(2)
        src = {"vit.embeddings.cls_token": torch.randn(1, 1, 8).to(torch.float16)}
        self.check(src["vit.embeddings.cls_token"].clone(), src, 1)

    def test_not_a_tiling(self):
        """A transpose, a dtype cast, a permutation or bytes from nowhere: none."""
        torch.manual_seed(3)
        a, b = torch.randn(16, 8).to(torch.bfloat16), torch.randn(16, 8).to(torch.bfloat16)
        src = {"a": a, "b": b}
        idx = Index(src)
        self.assertIsNone(idx.pieces(a.t().contiguous()))
        self.assertIsNone(idx.pieces(a.float()))
        self.assertIsNone(idx.pieces(torch.cat([a, b])[torch.randperm(32)]))
        self.assertIsNone(idx.pieces(torch.cat([a, torch.randn(1, 8).to(torch.bfloat16)])))

    def test_degenerate(self):
        """Zeros and ones everywhere (biases, norms), tensors shorter than
        the fingerprint, bools, bytes, and an empty tensor."""
        src = {f"bias{k}": torch.zeros(k + 1, dtype=torch.float32) for k in range(8)}
        src.update({f"norm{k}": torch.ones(64, dtype=torch.bfloat16) for k in range(40)})
        src["tiny"] = torch.tensor([7], dtype=torch.int8)
        src["mask"] = torch.tensor([True, False, True])
        src["empty"] = torch.empty(0)
        self.check(torch.zeros(36, dtype=torch.float32), src)
        self.check(torch.ones(64 * 5, dtype=torch.bfloat16), src)
        self.check(torch.tensor([7], dtype=torch.int8), src, 1)
        self.check(torch.tensor([True, False, True]), src, 1)
        self.assertEqual(Index(src).pieces(torch.empty(0)), [])
        self.assertLess(1, PREFIX)

    def test_many_same_prefix(self):
        """Sources sharing their first bytes but not the rest: each range
        still finds its own source."""
        torch.manual_seed(4)
        src = {}
        for k in range(100):
            t = torch.zeros(64)
            t[40:] = torch.randn(24)
            src[f"t{k}"] = t
        order = [src[f"t{k}"] for k in (5, 99, 0, 42)]
        self.check(torch.cat(order), src, 4)


if __name__ == "__main__":
    unittest.main()
