"""splitzip.torch on the CPU: run where torch is installed (the GPU machine;
CI has no torch and skips with a message)."""

import os
import subprocess
import tempfile
import unittest

import testenv  # noqa: E402  (python/tests; before splitzip)
import stfile  # noqa: E402  (python/tests)

BIN = testenv.BIN

try:
    import torch
except ImportError:  # pragma: no cover
    torch = None


@unittest.skipIf(torch is None, "torch is not installed (the GPU machine has it)")
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


if __name__ == "__main__":
    unittest.main()
