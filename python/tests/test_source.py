"""splitzip._source: a cache's tensors as the lazy state_dict values
splitzip.transformers hands to transformers, read bit for bit when asked
for (t[...]) from several threads, as transformers' loader does, and
what device_map values mean. CPU only: no transformers needed."""

import concurrent.futures
import tempfile
import unittest

import stfile
import testenv  # noqa: E402  (python/tests; before splitzip)
import torch

from splitzip._source import Lazy, Source, device_of, single_device


class TestSource(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        import splitzip
        cls.tmp = tempfile.TemporaryDirectory()
        cls.src, cls.cache = testenv.generated(cls.tmp.name, size="2MiB")
        cls.want = stfile.read_dir(cls.src)
        cls.c = splitzip.Cache(cls.cache)

    @classmethod
    def tearDownClass(cls):
        cls.c.close()
        cls.tmp.cleanup()

    def test_lazy_bit_for_bit(self):
        """Every tensor, materialised by four threads at once as t[...]:
        the file's bytes, dtype and shape; kept when asked to be."""
        src = Source(self.c, keep=True)
        sd = src.lazy()
        self.assertEqual(set(sd), set(self.want))
        for name, v in sd.items():
            self.assertIsInstance(v, Lazy)
            dt, shape, _ = self.want[name]
            self.assertEqual(v.get_dtype(), dt)
            self.assertEqual(tuple(v.shape), shape)
            self.assertEqual(v.get_shape(), list(shape))
        with concurrent.futures.ThreadPoolExecutor(4) as ex:
            got = dict(zip(sd, ex.map(lambda v: v[...], sd.values())))
        for name, t in got.items():
            self.assertEqual(t.contiguous().view(torch.uint8).numpy().tobytes(), self.want[name][2], name)
            self.assertIs(src.kept[name], t)
        name = next(n for n, (_, shape, _) in self.want.items() if len(shape) == 2 and shape[0] > 1)
        self.assertTrue(torch.equal(sd[name][1:], got[name][1:]))

    def test_not_kept(self):
        src = Source(self.c)
        name = self.c.names()[0]
        src.lazy()[name][...]
        self.assertEqual(src.kept, {})

    def test_device_maps(self):
        cpu = torch.device("cpu")
        self.assertEqual(single_device("cpu"), cpu)
        self.assertEqual(single_device({"": "cpu"}), cpu)
        self.assertEqual(single_device({"model.embed": "cpu", "lm_head": torch.device("cpu")}), cpu)
        self.assertEqual(single_device(3), torch.device("cuda", 3))
        self.assertEqual(single_device({"a": 1, "b": "cuda:1"}), torch.device("cuda", 1))
        for spread in ("auto", "balanced", "sequential", {"a": 0, "b": "cpu"}, {"a": "disk"}):
            self.assertIsNone(single_device(spread), spread)
        self.assertIsNone(device_of(True))


if __name__ == "__main__":
    unittest.main()
