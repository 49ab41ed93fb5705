"""CPU-path tests of the Python binding, run by `make test` (python3-numpy)."""

import os
import subprocess
import tempfile
import threading
import unittest

import testenv  # noqa: E402  (python/tests; before splitzip)

ROOT, INSTALLED = testenv.ROOT, testenv.INSTALLED

import numpy as np

import stfile  # noqa: E402  (python/tests)

BIN = testenv.BIN



def gen_compressed(d, size, dtype, *flags):
    """A generated checkpoint of dtype in d, compressed with flags: its
    folder, the cache, and its tensors as read from the files."""
    src, cache = os.path.join(d, "ck"), os.path.join(d, "c")
    subprocess.run([BIN, "gen", src, "--size", size, "--dtype", dtype, "-q"], check=True, stdout=subprocess.DEVNULL)
    want = stfile.read_dir(src)
    subprocess.run([BIN, "compress", src, "-o", cache, "--no-sync", "-q", *flags], check=True, stdout=subprocess.DEVNULL)
    return src, cache, want

class TestNumpy(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.src, cls.cache = testenv.generated(cls.tmp.name)
        cls.want = stfile.read_dir(cls.src)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def test_installed_package(self):
        import splitzip
        self.assertTrue(splitzip.__version__)
        if INSTALLED:
            src = os.path.join(ROOT, "python")
            self.assertFalse(os.path.abspath(splitzip.__file__).startswith(src + os.sep),
                             f"splitzip imported from the source tree ({splitzip.__file__}), not the installed wheel")

    def test_resident(self):
        """A cache opened resident reads on the host as any other."""
        import splitzip
        with splitzip.Cache(self.cache, resident=True) as c:
            name = c.names()[0]
            info = c.info(name)
            buf = bytearray(info.nbytes)
            c.read_into(name, buf)
            self.assertEqual(bytes(buf), self.want[name][2])

    def test_load_file_bit_for_bit(self):
        from splitzip.numpy import load_file
        got = load_file(self.cache)
        self.assertEqual(set(got), set(self.want))
        for name, (dtype, shape, raw) in self.want.items():
            a = got[name]
            self.assertEqual(a.shape, shape, name)
            self.assertEqual(a.tobytes(), raw, name)

    def test_high_rank(self):
        """Tensors of 9 and 12 dimensions keep their shapes (the C struct has room for 8)."""
        from splitzip.numpy import load_file
        with tempfile.TemporaryDirectory() as d:
            os.mkdir(os.path.join(d, "src"))
            src, cache = os.path.join(d, "src", "m.safetensors"), os.path.join(d, "c")
            rng = np.random.default_rng(1)
            shapes = {"nine": (2,) * 8 + (3000,), "twelve": (1,) * 11 + (5,)}
            tensors = []
            for name, shape in shapes.items():
                v = (rng.standard_normal(int(np.prod(shape))).astype(np.float32) * 0.02).view(np.uint32) >> 16
                tensors.append((name, "BF16", shape, v.astype(np.uint16).tobytes()))
            stfile.write(src, tensors)
            subprocess.run([BIN, "compress", src, "-o", cache, "--no-sync", "-q"], check=True, stdout=subprocess.DEVNULL)
            got = load_file(cache)
            for name, _, shape, b in tensors:
                self.assertEqual(got[name].shape, shape)
                self.assertEqual(got[name].tobytes(), b)

    def test_self_contained_without_source(self):
        """A --self-contained cache loads with its source gone."""
        import shutil
        from splitzip.numpy import load_file
        with tempfile.TemporaryDirectory() as d:
            src, cache = os.path.join(d, "ck"), os.path.join(d, "c")
            shutil.copytree(self.src, src)
            subprocess.run([BIN, "compress", src, "-o", cache, "--no-sync", "--self-contained", "-q"], check=True, stdout=subprocess.DEVNULL)
            shutil.rmtree(src)
            got = load_file(cache)
            self.assertEqual(set(got), set(self.want))
            for name, (dtype, shape, data) in self.want.items():
                self.assertEqual(got[name].tobytes(), data, name)

    def test_entropy_without_source(self):
        """Entropy payloads (F16 weights, --codec entropy) load bit for bit with the source gone."""
        import shutil
        from splitzip.numpy import load_file
        with tempfile.TemporaryDirectory() as d:
            src, cache, want = gen_compressed(d, "2MiB", "F16", "--codec", "entropy", "--self-contained")
            shutil.rmtree(src)
            got = load_file(cache)
            self.assertEqual(set(got), set(want))
            for name, (dtype, shape, data) in want.items():
                self.assertEqual(got[name].tobytes(), data, name)
            self.assertTrue(any(dtype == "F16" for dtype, _, _ in want.values()))
            # info says how each tensor is stored: entropy payloads are not
            # "compressed" (a fixed-rate payload) but are payloads.
            from splitzip import Cache
            with Cache(cache) as c:
                kinds = {i.payload for i in c.infos()}
                self.assertIn("entropy", kinds)
                self.assertLessEqual(kinds, {"entropy", "raw"})
                for i in c.infos():
                    self.assertEqual(i.payload == "entropy", c.stored_size(i.index) < i.nbytes, i.name)
                    self.assertFalse(i.compressed, i.name)

    def test_fp8_shapes(self):
        """FP8 tensors (F8_E4M3 weights, entropy payloads) come back as uint8
        arrays of their shapes, bit for bit."""
        from splitzip.numpy import load_file
        with tempfile.TemporaryDirectory() as d:
            _, cache, want = gen_compressed(d, "1MiB", "F8_E4M3", "--codec", "entropy")
            got = load_file(cache)
            fp8 = [n for n, (dtype, _, _) in want.items() if dtype == "F8_E4M3"]
            self.assertTrue(fp8)
            for name in fp8:
                dtype, shape, data = want[name]
                self.assertEqual(got[name].dtype, np.uint8, name)
                self.assertEqual(list(got[name].shape), list(shape), name)
                self.assertEqual(got[name].tobytes(), data, name)

    def test_pack_keeps_entropy(self):
        """A pack of an entropy cache made with entropy=True keeps its entropy
        payloads (their table entries write nothing, the batch decode's
        arguments in the info) and is smaller than one made with them
        decoded; a fixed cache's pack is the same either way."""
        import struct
        import splitzip
        with tempfile.TemporaryDirectory() as d:
            cache = os.path.join(d, "c")
            subprocess.run([BIN, "compress", self.src, "-o", cache, "--codec", "entropy", "--no-sync", "-q"],
                           check=True, stdout=subprocess.DEVNULL)
            for path, entropy_cache in ((cache, True), (self.cache, False)):
                with splitzip.Cache(path) as c:
                    byindex = {c.info(name).index: c.info(name) for name in c.names()}
                    idx = sorted(byindex)
                    dsts, caps, off = [], [], 1 << 40
                    for i in idx:
                        n = byindex[i].nbytes
                        dsts.append(off)
                        caps.append(n)
                        off += (n + 255) & ~255
                    infos, packs = [], []
                    for entropy in (False, True):
                        buf = np.zeros(c.pack_size(idx, entropy=entropy), dtype=np.uint8)
                        info = c.pack_into_ptr(idx, dsts, caps, buf.ctypes.data, buf.nbytes, entropy=entropy)
                        infos.append(info)
                        packs.append(buf[:info.staged].tobytes())
                    decoded, kept = infos
                    self.assertEqual(decoded.entropy_count, 0)
                    if not entropy_cache:
                        self.assertEqual(packs[0], packs[1])
                        continue
                    self.assertGreater(kept.entropy_count, 0)
                    self.assertLess(kept.staged, decoded.staged)
                    self.assertEqual(kept.staged, kept.entropy_at + 832 * kept.entropy_count)
                    # Each kept payload's table entry (dst, src, stored, size) writes nothing;
                    # coded tensors (stored in fewer bytes) keep their payloads, but for the
                    # smallest, whose 832-byte descriptor would cost more than they save.
                    coded = [k for k in idx if c.stored_size(k) < byindex[k].nbytes]
                    empty = sum(struct.unpack_from("<4Q", packs[1], 64 * k)[2:] == (0, 0) for k in coded)
                    self.assertEqual(empty, kept.entropy_count)
                    self.assertLessEqual(kept.entropy_count, len(coded))

    def test_lookups_and_errors(self):
        import splitzip
        with splitzip.Cache(self.cache) as c:
            info = c.info("model.embed_tokens.weight")
            self.assertTrue(info.compressed)
            self.assertEqual(c.find_slice("model-00001-of-00002.safetensors", info.offset, info.nbytes), info.index)
            with self.assertRaises(splitzip.Error) as e:
                c.info("no.such.tensor")
            self.assertEqual(e.exception.status, 2)
            with self.assertRaises(splitzip.Error) as e:
                c.read_into("model.embed_tokens.weight", bytearray(3))
            self.assertEqual(e.exception.status, 5)
            self.assertIn("model.embed_tokens.weight", e.exception.message)
        with self.assertRaises(splitzip.Error):
            splitzip.Cache(os.path.join(self.tmp.name, "nope"))

    def test_container(self):
        """A Cache answers `in` and iterates its names, takes numpy
        integers as indices, and says its path in its repr."""
        import numpy as np
        import splitzip
        c = splitzip.Cache(self.cache)
        with c:
            names = c.names()
            self.assertEqual(list(c), names)
            self.assertIn(names[0], c)
            self.assertNotIn("no.such.tensor", c)
            self.assertNotIn(3, c)
            self.assertEqual(c.info_at(np.int64(1)), c.info_at(1))
            for b in (True, np.True_):
                with self.assertRaises(TypeError):
                    c.info_at(b)
            with self.assertRaises(TypeError):
                c.info_at(1.0)
            self.assertIn(os.path.abspath(self.cache), repr(c))
            self.assertIn(f"{len(names)} tensors", repr(c))
        self.assertIn("closed", repr(c))

    def test_get_tensor(self):
        """get_tensor gives one tensor as load_file gives it."""
        import numpy as np
        import splitzip
        from splitzip.numpy import get_tensor, load_file
        every = load_file(self.cache)
        with splitzip.Cache(self.cache) as c:
            for name in c.names()[:5]:
                a = get_tensor(c, name)
                self.assertEqual((a.dtype, a.shape), (every[name].dtype, every[name].shape))
                self.assertTrue(np.array_equal(a.view(np.uint8), every[name].view(np.uint8)), name)
            with self.assertRaises(KeyError):
                get_tensor(c, "no.such.tensor")

    def test_upload_batch_checks_arguments_first(self):
        # Checked before any device is touched, so these run without a GPU.
        import splitzip
        with splitzip.Cache(self.cache) as c:
            info = c.info("model.embed_tokens.weight")
            with self.assertRaises(splitzip.Error) as e:
                c.upload_batch([info.index], [4096], [info.nbytes - 2])
            self.assertEqual(e.exception.status, 5)
            self.assertIn("model.embed_tokens.weight", e.exception.message)
            with self.assertRaises(splitzip.Error) as e:
                c.upload_batch([info.index], [4097], [info.nbytes])
            self.assertEqual(e.exception.status, 1)
            with self.assertRaises(ValueError):
                c.upload_batch([info.index], [], [])

    def test_threads(self):
        import splitzip
        errors = []
        with splitzip.Cache(self.cache) as c:
            def work():
                try:
                    for name, (_, _, raw) in self.want.items():
                        buf = bytearray(len(raw))
                        c.read_into(name, buf)
                        if bytes(buf) != raw:
                            errors.append(name)
                except Exception as e:  # pragma: no cover
                    errors.append(repr(e))
            ts = [threading.Thread(target=work) for _ in range(6)]
            for t in ts:
                t.start()
            for t in ts:
                t.join()
        self.assertEqual(errors, [])


if __name__ == "__main__":
    unittest.main()
