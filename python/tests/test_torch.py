"""splitzip.torch on the CPU (Debian's python3-torch: make python-test
installs it or fails)."""

import os
import subprocess
import sys
import tempfile
import unittest

import testenv  # noqa: E402  (python/tests; before splitzip)
import stfile  # noqa: E402  (python/tests)

BIN = testenv.BIN

import torch


class TestTorch(unittest.TestCase):
    def test_every_integer_width(self):
        """U16, U32 and U64 tensors (torch 2.3 and later) load bit for bit, beside BF16."""
        from splitzip.torch import DTYPES, load_file
        dtypes = [d for d in ("U8", "U16", "U32", "U64", "I16", "I32", "I64", "BF16", "F32") if d in DTYPES]
        self.assertTrue({"U16", "U32", "U64"} <= set(dtypes) or torch.__version__ < "2.3", torch.__version__)
        size = {"U8": 1, "U16": 2, "U32": 4, "U64": 8, "I16": 2, "I32": 4, "I64": 8, "BF16": 2, "F32": 4}
        with tempfile.TemporaryDirectory() as d:
            os.mkdir(os.path.join(d, "src"))
            path, cache = os.path.join(d, "src", "m.safetensors"), os.path.join(d, "c")
            tensors = []
            for i, dt in enumerate(dtypes):
                n = 40000
                b = bytes((j * 7 + i) & 0xFF for j in range(n * size[dt]))
                if dt == "BF16":  # real-looking values, so it is compressed
                    b = (torch.randn(n) * 0.02).to(torch.bfloat16).view(torch.int16).numpy().tobytes()
                tensors.append((f"t_{dt}", dt, (n,), b))
            stfile.write(path, tensors)
            subprocess.run([BIN, "compress", path, "-o", cache, "--no-sync", "-q"], check=True, stdout=subprocess.DEVNULL)
            got = load_file(cache)
            for name, dt, _, b in tensors:
                t = got[name]
                self.assertEqual(t.dtype, DTYPES[dt])
                self.assertEqual(t.contiguous().view(torch.uint8).numpy().tobytes(), b, dt)

    def test_missing_dtype_hint(self):
        """A dtype this torch lacks is refused naming the torch release
        that has it (U16 came in 2.3, FP8 in 2.1); torch's table is
        narrowed here so that the test runs on every release."""
        import splitzip
        from unittest import mock
        from splitzip.torch import DTYPES, load_file
        with tempfile.TemporaryDirectory() as d:
            os.mkdir(os.path.join(d, "src"))
            path, cache = os.path.join(d, "src", "m.safetensors"), os.path.join(d, "c")
            stfile.write(path, [("t", "U16", (4,), bytes(8))])
            subprocess.run([BIN, "compress", path, "-o", cache, "--no-sync", "-q"], check=True, stdout=subprocess.DEVNULL)
            narrowed = {k: v for k, v in DTYPES.items() if k != "U16"}
            with mock.patch.dict(DTYPES, narrowed, clear=True):
                with self.assertRaises(splitzip.InvalidArgumentError) as e:
                    load_file(cache)
            self.assertIn("t: dtype U16 has no equivalent in torch", str(e.exception))
            self.assertIn("need torch 2.3 or later", str(e.exception))


class TestUploadInto(unittest.TestCase):
    """upload_into on the CPU: caller-owned tensors filled bit for bit, and
    every mismatch refused before anything is written, naming the tensor."""

    @classmethod
    def setUpClass(cls):
        import splitzip
        cls.tmp = tempfile.TemporaryDirectory()
        cls.src, cls.cache = testenv.generated(cls.tmp.name)
        cls.want = stfile.read_dir(cls.src)
        cls.c = splitzip.Cache(cls.cache)

    @classmethod
    def tearDownClass(cls):
        cls.c.close()
        cls.tmp.cleanup()

    def fresh(self, name):
        from splitzip.torch import DTYPES
        info = self.c.info(name)
        return info, torch.zeros(info.shape, dtype=DTYPES[info.dtype])

    def test_fills_bit_for_bit(self):
        from splitzip.torch import upload_into
        ts = {n: self.fresh(n)[1] for n in self.c.names()}
        self.assertEqual(upload_into(self.c, ts), [])
        for n, t in ts.items():
            self.assertEqual(t.view(torch.uint8).numpy().tobytes(), self.want[n][2], n)

    def test_refuses_mismatches(self):
        from splitzip.torch import upload_into
        name = "model.embed_tokens.weight"
        info, good = self.fresh(name)
        rows, cols = info.shape
        other, ok = "model.norm.weight", self.fresh("model.norm.weight")[1]
        cases = {
            # Same bytes as the tensor, so only a check of dtype or shape
            # can see them.
            "dtype": (torch.zeros(info.shape, dtype=torch.int16), ["dtype torch.int16", "BF16"]),
            "shape": (torch.zeros((cols, rows), dtype=good.dtype), [f"shape {(cols, rows)}", f"{(rows, cols)}"]),
            "flat": (torch.zeros(rows * cols, dtype=good.dtype), [f"shape {(rows * cols,)}"]),
            "contiguity": (torch.zeros((cols, rows), dtype=good.dtype).t(), ["not contiguous"]),
            "device": (torch.zeros(info.shape, dtype=good.dtype, device="meta"), ["device meta"]),
        }
        for what, (t, words) in cases.items():
            before = ok.clone()
            with self.assertRaises(ValueError, msg=what) as e:
                upload_into(self.c, {other: ok, name: t})
            msg = str(e.exception)
            self.assertIn(repr(name), msg, what)
            for w in words:
                self.assertIn(w, msg, what)
            self.assertNotIn("tensor 0", msg, what)
            self.assertTrue(torch.equal(ok, before), f"{what}: {other} was written before the check failed")
        with self.assertRaises(TypeError):
            upload_into(self.c, {name: bytearray(info.nbytes)})
        with self.assertRaises(KeyError):
            upload_into(self.c, {"no.such.tensor": good})


class TestTorchMissing(unittest.TestCase):
    def test_import_error_names_torch(self):
        """Without torch, importing splitzip.torch says what is missing."""
        code = ("import sys; sys.modules['torch'] = None\n"
                "import testenv\n"
                "try:\n    import splitzip.torch\nexcept ImportError as e:\n    print(e)\n")
        p = subprocess.run([sys.executable, "-c", code], cwd=testenv.HERE, capture_output=True, text=True, check=True)
        self.assertIn("needs PyTorch", p.stdout)


if __name__ == "__main__":
    unittest.main()


class TestExample(unittest.TestCase):
    def test_load_torch_on_cpu(self):
        """examples/python/load_torch.py runs as its docstring says with
        --device cpu (it called torch.cuda.synchronize whatever the device)."""
        script = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "python", "load_torch.py")
        with tempfile.TemporaryDirectory() as d:
            _, cache = testenv.generated(d, size="1MiB")
            # The script finds splitzip where this test does (the
            # installed wheel, or the source tree testenv put on the path).
            env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
            r = subprocess.run([sys.executable, script, cache, "--device", "cpu"], capture_output=True, text=True, env=env)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn("upload_into refilled 2", r.stdout)


class TestNoGPU(unittest.TestCase):
    @unittest.skipIf(torch.cuda.is_available(), "a GPU is here")
    def test_cuda_device_without_gpu(self):
        """load_file to a CUDA device where torch finds none raises
        splitzip.DeviceError (a RuntimeError), not torch's AssertionError."""
        import splitzip
        from splitzip.torch import load_file
        with tempfile.TemporaryDirectory() as d:
            _, cache = testenv.generated(d, size="256KiB", shards=1)
            with self.assertRaises(splitzip.DeviceError) as cm:
                load_file(cache, device="cuda:0")
            self.assertIsInstance(cm.exception, RuntimeError)

    def test_other_device_named(self):
        """load_file to a device neither the CPU nor CUDA (meta) names
        the argument, before any tensor is made."""
        import splitzip
        from splitzip.torch import load_file
        with tempfile.TemporaryDirectory() as d:
            _, cache = testenv.generated(d, size="256KiB", shards=1)
            with self.assertRaises(splitzip.InvalidArgumentError) as cm:
                load_file(cache, device="meta")
            self.assertIn("device=meta", str(cm.exception))
            self.assertNotIn("tensor", str(cm.exception))
            from splitzip.torch import get_tensor
            every = load_file(cache)
            with splitzip.Cache(cache) as c:
                name = c.names()[0]
                got = get_tensor(c, name)
                self.assertTrue(torch.equal(got.view(torch.uint8), every[name].view(torch.uint8)))
                with self.assertRaises(splitzip.InvalidArgumentError):
                    get_tensor(c, name, device="meta")
