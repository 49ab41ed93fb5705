"""splitzip.safe_open against the files it was compressed from: keys,
metadata, tensors and slices bit for bit, on the CPU (python3-numpy,
python3-torch)."""

import os
import shutil
import subprocess
import tempfile
import unittest

import testenv  # noqa: E402  (python/tests; before splitzip)

import numpy as np
import torch

import stfile  # noqa: E402  (python/tests)

BIN = testenv.BIN


def bf16(rng, n):
    """n BF16 values of a trained-looking spread, as bytes."""
    return (rng.normal(0, 0.02, n).astype(np.float32).view(np.uint32) >> 16).astype(np.uint16).tobytes()


def bits(t):
    """t's bits as integers of its width (a view of any strides)."""
    return t.view({torch.bfloat16: torch.int16, torch.float32: torch.int32, torch.int64: torch.int64}[t.dtype])


class TestSafeOpen(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        rng = np.random.default_rng(5)
        cls.src = os.path.join(cls.tmp.name, "ck")
        os.mkdir(cls.src)
        # 300 x 200 BF16 values span four 16,384-value chunks, so a slice of
        # rows is a part of several chunks; the F32 one is entropy-coded
        # under --codec entropy, the I64 one raw either way.
        cls.files = {
            "model-00001-of-00002.safetensors": ([("z.w", "BF16", (300, 200), bf16(rng, 60000)),
                                                  ("a.bias", "BF16", (200,), bf16(rng, 200))],
                                                 {"format": "pt", "note": "first"}),
            "model-00002-of-00002.safetensors": ([("m.f32", "F32", (70, 300), rng.normal(0, 1, 21000).astype(np.float32).tobytes()),
                                                  ("m.ids", "I64", (5, 3), np.arange(15, dtype=np.int64).tobytes())],
                                                 None),
        }
        for name, (ts, meta) in cls.files.items():
            stfile.write(os.path.join(cls.src, name), ts, meta)
        cls.want = stfile.read_dir(cls.src)
        cls.caches = {}
        for codec in ("fixed", "entropy"):
            c = os.path.join(cls.tmp.name, codec)
            subprocess.run([BIN, "compress", cls.src, "-o", c, "--codec", codec, "--self-contained", "--no-sync", "-q"],
                           check=True, stdout=subprocess.DEVNULL)
            cls.caches[codec] = c

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def full(self, name):
        dtype, shape, b = self.want[name]
        dt = {"BF16": torch.bfloat16, "F32": torch.float32, "I64": torch.int64}[dtype]
        return torch.frombuffer(bytearray(b), dtype=dt).reshape(shape)

    def test_keys_metadata_tensors(self):
        from splitzip import safe_open
        for codec, cache in self.caches.items():
            with self.subTest(codec=codec), safe_open(cache, framework="pt") as f:
                self.assertEqual(f.keys(), sorted(self.want))
                self.assertEqual(f.offset_keys(), ["z.w", "a.bias", "m.f32", "m.ids"])
                self.assertEqual(f.metadata(), {"format": "pt", "note": "first"})
                self.assertEqual(f.shard_metadata(), [("model-00001-of-00002.safetensors", {"format": "pt", "note": "first"}),
                                                      ("model-00002-of-00002.safetensors", None)])
                for name in f.keys():
                    t = f.get_tensor(name)
                    self.assertTrue(torch.equal(bits(t), bits(self.full(name))), name)
            with self.subTest(codec=codec, framework="np"), safe_open(cache, framework="np") as f:
                for name in f.keys():
                    self.assertEqual(f.get_tensor(name).tobytes(), self.want[name][2], name)

    def test_slices(self):
        """Every index as torch and numpy take it, bit for bit, in a tensor
        of its own."""
        from splitzip import safe_open
        for codec, cache in self.caches.items():
            with safe_open(cache, framework="pt") as f:
                for name in ("z.w", "m.f32", "m.ids", "a.bias"):
                    s = f.get_slice(name)
                    full = self.full(name)
                    self.assertEqual(s.get_shape(), list(full.shape))
                    self.assertEqual(s.get_dtype(), self.want[name][0])
                    n = full.shape[0]
                    indices = [slice(0, 1), slice(3, n - 2), slice(n - 1, None), slice(None, 7), 0, -1, n // 2,
                               (slice(2, 9), ...), slice(5, 2), slice(None), ..., slice(1, 3, 2), slice(0, n, 2)]
                    if full.dim() > 1:
                        indices += [(slice(2, 9), slice(None)), (slice(None), slice(1, 3)), (4, slice(None)), (4, 1)]
                    for index in indices:
                        with self.subTest(codec=codec, name=name, index=index):
                            got, want = s[index], full[index]
                            self.assertEqual(tuple(got.shape), tuple(want.shape))
                            self.assertTrue(torch.equal(bits(got), bits(want)))
                    with self.assertRaises(IndexError):
                        s[n]
                    with self.assertRaises(IndexError):  # too many indices, as torch says
                        s[(slice(2, 9),) + (slice(None),) * full.dim()]
                    # Indices torch takes as tensors, not ints (trial 71b:
                    # a 0-d bool read as row 1, a one-element index lost a
                    # dimension).
                    for index in (torch.tensor(True), torch.tensor(False), torch.tensor([2]), torch.tensor([0, 2]),
                                  np.array([1, 2])):
                        with self.subTest(codec=codec, name=name, index=index):
                            got, want = s[index], full[index]
                            self.assertEqual(tuple(got.shape), tuple(want.shape))
                            self.assertTrue(torch.equal(bits(got), bits(want)))
                    if full.dim() > 1:
                        got = s[0, np.array([1, 2])]
                        self.assertTrue(torch.equal(bits(got), bits(full[0, np.array([1, 2])])))
                    # A part is a tensor of its own, not a view of the whole.
                    part = s[1:3]
                    self.assertIsNone(part._base)
                    self.assertEqual(part.untyped_storage().nbytes() if hasattr(part, "untyped_storage") else
                                     part.storage().nbytes(), part.numel() * part.element_size())
            with safe_open(cache, framework="np") as f:
                got = f.get_slice("z.w")[10:250]
                self.assertEqual(got.dtype, np.uint16)
                self.assertEqual(got.tobytes(), self.full("z.w")[10:250].contiguous().view(torch.uint8).numpy().tobytes())

    def test_source_gone(self):
        """A self-contained cache serves keys, metadata and slices without
        its source: the headers are in the cache."""
        from splitzip import safe_open
        moved = self.src + ".away"
        shutil.move(self.src, moved)
        try:
            with safe_open(self.caches["fixed"], framework="pt") as f:
                self.assertEqual(f.metadata()["format"], "pt")
                self.assertTrue(torch.equal(bits(f.get_slice("z.w")[7]), bits(self.full("z.w")[7])))
        finally:
            shutil.move(moved, self.src)

    def test_refusals(self):
        import splitzip
        with self.assertRaises(ValueError):
            splitzip.safe_open(self.caches["fixed"], framework="tf")
        with self.assertRaises(ValueError):
            splitzip.safe_open(self.caches["fixed"], framework="np", device="cuda:0")
        with self.assertRaises(splitzip.InvalidArgumentError):
            splitzip.safe_open(self.caches["fixed"], framework="pt", device="bogus")
        with splitzip.safe_open(self.caches["fixed"]) as f, self.assertRaises(KeyError):
            f.get_slice("nope")


if __name__ == "__main__":
    unittest.main()
