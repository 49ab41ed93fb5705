"""splitzip.nn: Linear layers that multiply straight from fixed payloads
on the GPU (issue 36)."""

import os
import subprocess
import tempfile
import unittest

import numpy as np
import torch

from testenv import BIN, gpu_missing
import stfile
import splitzip
from splitzip import nn


def bf16_bytes(a: np.ndarray) -> bytes:
    """float32 values rounded to BF16 (to nearest even), as bytes."""
    u = a.astype(np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return u.astype(np.uint16).tobytes()


def checkpoint(tmp: str, rows: int, cols: int, seed: int = 36):
    """A checkpoint of one BF16 weight and one F32 tensor, compressed:
    returns (cache dir, the weight as a float32 array)."""
    rng = np.random.default_rng(seed)
    w = rng.normal(0, 0.02, (rows, cols)).astype(np.float32)
    wb = bf16_bytes(w)
    w = np.frombuffer(wb, dtype=np.uint16).astype(np.uint32) << 16
    src, cache = os.path.join(tmp, "ck"), os.path.join(tmp, "cache")
    os.makedirs(src)
    stfile.write(os.path.join(src, "model.safetensors"), [
        ("proj.weight", "BF16", (rows, cols), wb),
        ("norm.weight", "F32", (4, 8), np.ones(32, dtype=np.float32).tobytes()),
    ])
    subprocess.run([BIN, "compress", src, "-o", cache, "--no-sync", "-q"], check=True, stdout=subprocess.DEVNULL)
    return cache, w.view(np.float32).reshape(rows, cols)


class TestOp(unittest.TestCase):
    def test_op_needs_torch_2_4(self):
        """The custom op is defined where torch has custom_op, else the
        error names the torch version needed."""
        if hasattr(torch, "library") and hasattr(torch.library, "custom_op"):
            self.assertTrue(callable(nn._gemv_op()))
        else:
            with self.assertRaisesRegex(RuntimeError, "torch 2.4"):
                nn._gemv_op()


class TestNoGPU(unittest.TestCase):
    @unittest.skipIf(torch.cuda.is_available(), "torch finds a CUDA device")
    def test_device_error(self):
        """Without a CUDA device a layer, or replacing a model's linears,
        raises DeviceError (a splitzip.Error), as load_file does, not
        torch's AssertionError."""
        with tempfile.TemporaryDirectory() as tmp:
            cache, _ = checkpoint(tmp, 64, 128)
            with splitzip.Cache(cache) as c:
                with self.assertRaisesRegex(splitzip.DeviceError, "no CUDA device"):
                    nn.FixedLinear.from_cache(c, "proj.weight")
                model = torch.nn.Module()
                model.proj = torch.nn.Linear(128, 64, bias=False)
                with self.assertRaises(splitzip.DeviceError):
                    nn.replace_linears(model, c)


@unittest.skipIf(gpu_missing("for splitzip.nn"), gpu_missing("for splitzip.nn") or "")
class TestFixedLinear(unittest.TestCase):
    def test_matches_linear(self):
        """Every input size (decode steps and a prefill of several
        launches) gives x @ W.T within 2 BF16 ulps, plus a bias; a CUDA
        graph's replay gives the eager result's bits."""
        with tempfile.TemporaryDirectory() as tmp:
            rows, cols = 384, 4096
            cache, w = checkpoint(tmp, rows, cols)
            with splitzip.Cache(cache) as c:
                bias = torch.randn(rows, dtype=torch.bfloat16)
                layer = nn.FixedLinear.from_cache(c, "proj.weight", device=0, bias=bias)
                self.assertLess(layer.payload.numel(), 0.77 * 2 * rows * cols)
                wt = torch.from_numpy(w).cuda()
                gen = torch.Generator(device="cuda").manual_seed(1)
                for tokens in (1, 3, 16, 37):
                    x = torch.randn(2, tokens, cols, device="cuda", generator=gen).to(torch.bfloat16)
                    y = layer(x)
                    self.assertEqual(y.shape, (2, tokens, rows))
                    exact = (x.double() @ wt.double().T) + bias.cuda().double()
                    mag = (x.double().abs() @ wt.double().abs().T)
                    ulp = torch.exp2(torch.floor(torch.log2(exact.abs().clamp_min(2.0 ** -126))) - 7)
                    err = (y.double() - exact).abs()
                    tol = 3 * ulp + 1e-5 * mag + 2 * torch.exp2(torch.floor(torch.log2(bias.cuda().double().abs().clamp_min(2.0 ** -126))) - 7)
                    self.assertTrue(bool((err <= tol).all()), f"{tokens} tokens: worst {float((err - tol).max())} over tolerance")
                layer.check()
                # CUDA graph: capture one decode step, replay, same bits.
                xs = torch.randn(1, cols, device="cuda", generator=gen).to(torch.bfloat16)
                eager = layer(xs)
                s = torch.cuda.Stream()
                s.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(s):
                    layer(xs)  # warm-up on the side stream, as capture wants
                torch.cuda.current_stream().wait_stream(s)
                g = torch.cuda.CUDAGraph()
                with torch.cuda.graph(g):
                    ys = layer(xs)
                g.replay()
                torch.cuda.synchronize()
                self.assertTrue(torch.equal(ys, eager))

    def test_refuses_what_is_not_a_fixed_payload(self):
        with tempfile.TemporaryDirectory() as tmp:
            cache, _ = checkpoint(tmp, 64, 4096)
            with splitzip.Cache(cache) as c:
                with self.assertRaisesRegex(ValueError, "2-D BF16"):
                    nn.FixedLinear.from_cache(c, "norm.weight")
                layer = nn.FixedLinear.from_cache(c, "proj.weight")
                with self.assertRaisesRegex(ValueError, "want BF16 and 4096"):
                    layer(torch.zeros(1, 32, dtype=torch.bfloat16, device="cuda"))
                with self.assertRaisesRegex(ValueError, "input on cpu"):
                    layer(torch.zeros(1, 4096, dtype=torch.bfloat16))
                bad = bytearray(layer.payload[:64].cpu().numpy().tobytes())
                bad[48] ^= 1
                with self.assertRaisesRegex(ValueError, "not the payload's header"):
                    nn.FixedLinear(c, layer.payload, bytes(bad), 64, 4096)

    def test_replace_linears(self):
        """A model's Linears held as fixed payloads become FixedLinears
        (biases kept); others stay; the model's output stays within
        rounding of the original's."""
        torch.manual_seed(36)
        model = torch.nn.Sequential(torch.nn.Linear(1024, 384), torch.nn.ReLU(), torch.nn.Linear(384, 200, bias=False),
                                    torch.nn.Linear(200, 8)).to(torch.bfloat16)
        with tempfile.TemporaryDirectory() as tmp:
            src, cache = os.path.join(tmp, "ck"), os.path.join(tmp, "cache")
            os.makedirs(src)
            sd = model.state_dict()
            stfile.write(os.path.join(src, "model.safetensors"), [
                (k, "BF16", tuple(v.shape), v.contiguous().view(torch.int16).numpy().tobytes()) for k, v in sd.items()])
            # The last Linear takes 200 features, not a multiple of 16:
            # it stays a Linear.
            subprocess.run([BIN, "compress", src, "-o", cache, "--no-sync", "-q"], check=True, stdout=subprocess.DEVNULL)
            model = model.cuda()
            x = torch.randn(3, 1024, device="cuda").to(torch.bfloat16)
            want = model(x)
            with splitzip.Cache(cache) as c:
                done = nn.replace_linears(model, c)
                self.assertEqual(done, ["0.weight", "2.weight"])
                self.assertIsInstance(model[0], nn.FixedLinear)
                self.assertIsInstance(model[2], nn.FixedLinear)
                self.assertIs(type(model[3]), torch.nn.Linear)
                self.assertIsNotNone(model[0].bias)
                got = model(x)
                model[0].check()
                self.assertEqual(got.shape, want.shape)
                self.assertTrue(torch.allclose(got.float(), want.float(), rtol=0.05, atol=0.05),
                                f"worst {float((got.float() - want.float()).abs().max())}")

    def test_replace_linears_leaves_what_it_cannot_take(self):
        """Linears the cache does not hold, or holds raw, stay (no error)."""
        model = torch.nn.Sequential(torch.nn.Linear(64, 32)).to(torch.bfloat16)
        with tempfile.TemporaryDirectory() as tmp:
            cache, _ = checkpoint(tmp, 64, 4096)
            with splitzip.Cache(cache) as c:
                self.assertEqual(nn.replace_linears(model, c), [])
                self.assertIs(type(model[0]), torch.nn.Linear)
            src, raw = os.path.join(tmp, "ck2"), os.path.join(tmp, "raw")
            os.makedirs(src)
            stfile.write(os.path.join(src, "model.safetensors"), [
                ("0.weight", "BF16", (32, 64), model[0].weight.detach().contiguous().view(torch.int16).numpy().tobytes())])
            subprocess.run([BIN, "compress", src, "-o", raw, "--min-saving", "0.99", "--no-sync", "-q"], check=True,
                           stdout=subprocess.DEVNULL)
            with splitzip.Cache(raw) as c:
                self.assertFalse(c.info("0.weight").compressed)
                self.assertEqual(nn.replace_linears(model, c), [])


if __name__ == "__main__":
    unittest.main()
