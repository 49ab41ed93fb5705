"""splitzip.offload_experts' layout checks, CPU only (run in CI): which
modules of a decoder layer hold fused experts, and how a fused
parameter's pieces split into one set per expert row, or do not."""

import unittest

import testenv  # noqa: F401,E402  (python/tests; before splitzip)
import torch

from splitzip.offload_experts import expert_modules, split_rows


class Experts(torch.nn.Module):
    def __init__(self, n, hidden, inter, bias=False):
        super().__init__()
        self.num_experts = n
        self.gate_up_proj = torch.nn.Parameter(torch.zeros(n, 2 * inter, hidden))
        self.down_proj = torch.nn.Parameter(torch.zeros(n, hidden, inter))
        if bias:
            self.down_proj_bias = torch.nn.Parameter(torch.zeros(n, hidden))


class Router(torch.nn.Module):
    def __init__(self, n, hidden):
        super().__init__()
        self.num_experts = n
        self.weight = torch.nn.Parameter(torch.zeros(n, hidden))


class Block(torch.nn.Module):
    def __init__(self, n=4, bias=False):
        super().__init__()
        self.gate = Router(n, 8)
        self.experts = Experts(n, 8, 6, bias)


class Layer(torch.nn.Module):
    def __init__(self, **kw):
        super().__init__()
        self.attn = torch.nn.Linear(8, 8)
        self.mlp = Block(**kw)


class TestExpertModules(unittest.TestCase):
    def test_found(self):
        got = [(name, n, rels) for name, _, n, rels in expert_modules(Layer())]
        self.assertEqual(got, [("mlp.experts", 4, ["mlp.experts.gate_up_proj", "mlp.experts.down_proj"])])

    def test_biases_come_along(self):
        got = expert_modules(Layer(bias=True))[0][3]
        self.assertEqual(got, ["mlp.experts.gate_up_proj", "mlp.experts.down_proj", "mlp.experts.down_proj_bias"])

    def test_router_alone_is_none(self):
        # The router has num_experts and an [experts, hidden] weight, but
        # no expert matrix; a dense layer has neither.
        self.assertEqual(expert_modules(Block().gate), [])
        self.assertEqual(expert_modules(torch.nn.Linear(4, 4)), [])


class TestSplitRows(unittest.TestCase):
    def test_per_expert_pieces(self):
        # gate_up of 4 experts, a row of 100 bytes: w1 and w3 of each.
        pcs = [("gu", e * 100 + h * 50, 10 + 2 * e + h, 50, f"e{e}.w{1 + 2 * h}") for e in range(4) for h in range(2)]
        pcs.append(("other", 0, 99, 400, "x"))
        got = split_rows(pcs, "gu", 400, 4)
        self.assertEqual(sorted(got), [0, 1, 2, 3])
        self.assertEqual([p[4] for p in got[2]], ["e2.w1", "e2.w3"])

    def test_fused_checkpoint_is_none(self):
        self.assertIsNone(split_rows([("gu", 0, 1, 400, "fused")], "gu", 400, 4))
        self.assertIsNone(split_rows([("gu", 50, 1, 100, "straddles")], "gu", 400, 4))
        self.assertIsNone(split_rows([("gu", 0, 1, 100, "uneven")], "gu", 402, 4))


if __name__ == "__main__":
    unittest.main()
